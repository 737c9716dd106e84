"""The FIPS mode of the OpenSSL library behind this process's TLS (``ssl``), for ``watcher_fips_mode``.

Upstream's gauge is 0 (off), 1 (on) or 2 (only), from Go's FIPS 140 module. The equivalent here:

* **on** (1): OpenSSL's default property query requires ``fips=yes``, so every algorithm fetched
  without an explicit query comes from the FIPS provider (``EVP_default_properties_is_fips_enabled``;
  ``FIPS_mode()`` on OpenSSL 1.x);
* **only** (2): that, and no non-FIPS provider offering algorithms (``default``, ``legacy``) is
  loaded, so a non-approved algorithm cannot be had even by asking for it;
* **off** (0): otherwise, and whenever the library cannot be asked (as upstream: unknown is off).

The kernel's ``/proc/sys/crypto/fips_enabled`` is not consulted: it says how the node boots, not what
this process's OpenSSL enforces (Debian's OpenSSL ignores it).
"""

from __future__ import annotations

import _ssl
import ctypes

FIPS_OFF = 0
FIPS_ON = 1
FIPS_ONLY = 2

_NON_FIPS_PROVIDERS = (b"default", b"legacy")


def _libcrypto() -> ctypes.CDLL:
    """The libcrypto ``ssl`` is linked with (its symbols resolve through the ``_ssl`` extension)."""
    path = getattr(_ssl, "__file__", None)  # None when _ssl is built into the interpreter
    return ctypes.CDLL(path)


def _openssl3_mode(lib: ctypes.CDLL) -> int:
    enabled = lib.EVP_default_properties_is_fips_enabled
    enabled.argtypes, enabled.restype = [ctypes.c_void_p], ctypes.c_int
    if not enabled(None):
        return FIPS_OFF
    available = lib.OSSL_PROVIDER_available
    available.argtypes, available.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_int
    if any(available(None, name) for name in _NON_FIPS_PROVIDERS):
        return FIPS_ON
    return FIPS_ONLY


def fips_mode() -> int:
    """0 (off), 1 (on) or 2 (only) for the OpenSSL of this process; see the module docstring."""
    try:
        lib = _libcrypto()
    except OSError:
        return FIPS_OFF
    if hasattr(lib, "EVP_default_properties_is_fips_enabled"):
        return _openssl3_mode(lib)
    if hasattr(lib, "FIPS_mode"):  # OpenSSL 1.x: the FIPS object module is on or off
        legacy = lib.FIPS_mode
        legacy.argtypes, legacy.restype = [], ctypes.c_int
        return FIPS_ON if legacy() else FIPS_OFF
    return FIPS_OFF
