"""Settings of the runtime watcher, read from the environment.

Upstream logs a bad setting and carries on with a default (or exits 0), which hides a broken
deployment behind a "healthy" pod. Here every setting is validated up front and a problem becomes a
:class:`ConfigError` that names the variable, so ``python -m watchers.runtime`` can print one line
and exit non-zero. The variables are listed in the package docstring (``watchers/runtime/__init__.py``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from watchers.runtime.version import VERSION

CONTRACTS = ("v1", "v2")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class ConfigError(ValueError):
    """A setting is missing or invalid; ``variable`` names the environment variable to fix."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable
        self.problem = problem


def split_host_port(addr: str, *, variable: str = "KCP_ADDR", default_port: int = 443) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6) and validate both parts.

    The host doubles as the TLS server name the listener certificate is checked against, so a
    scheme or a path (``https://kcp/x``) is rejected instead of producing a name that never matches.
    """
    value = addr.strip()
    if not value:
        raise ConfigError(variable, "must not be empty")
    if "://" in value or "/" in value:
        raise ConfigError(variable, f"expected host:port without scheme or path, got {addr!r}")
    port_text = ""
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep:
            raise ConfigError(variable, f"unterminated IPv6 literal in {addr!r}")
        if rest:
            if not rest.startswith(":"):
                raise ConfigError(variable, f"expected [ipv6]:port, got {addr!r}")
            port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise ConfigError(variable, f"invalid IPv6 address {host!r}") from exc
    elif value.count(":") > 1:
        raise ConfigError(variable, f"IPv6 addresses must be written as [addr]:port, got {addr!r}")
    else:
        host, _, port_text = value.partition(":")
        if ":" in value and not port_text:
            raise ConfigError(variable, f"empty port in {addr!r}")
    if not host:
        raise ConfigError(variable, f"empty host in {addr!r}")
    port = parse_port(port_text, variable=variable) if port_text else default_port
    return host, port


def parse_port(text: str, *, variable: str, allow_zero: bool = False) -> int:
    """Parse a TCP port; 0 (pick a free port) is only for in-process use, never from the environment."""
    try:
        port = int(text.strip())
    except ValueError:
        raise ConfigError(variable, f"not a port number: {text!r}") from None
    low = 0 if allow_zero else 1
    if not low <= port <= 65535:
        raise ConfigError(variable, f"port {port} out of range {low}..65535")
    return port


def _number(env: Mapping[str, str], variable: str, default: float, *, low: float, high: float) -> float:
    raw = env.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(variable, f"not a number: {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(variable, f"{raw} out of range {low:g}..{high:g}")
    return value


def _integer(env: Mapping[str, str], variable: str, default: int, *, low: int, high: int) -> int:
    raw = env.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(variable, f"not an integer: {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(variable, f"{value} out of range {low}..{high}")
    return value


def _boolean(env: Mapping[str, str], variable: str, default: bool) -> bool:
    raw = env.get(variable, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(variable, f"expected true or false, got {raw!r}")


def _required(env: Mapping[str, str], variable: str) -> str:
    value = env.get(variable, "").strip()
    if not value:
        raise ConfigError(variable, "required but not set")
    return value


@dataclass(frozen=True)
class Config:
    """Everything the watcher needs; build it with :meth:`from_env` or directly in tests.

    Ports may be 0 here (the OS picks one; :class:`~watchers.runtime.app.WatcherServer` reports the
    bound port), which is how tests run several watchers side by side.
    """

    ca_cert: str
    tls_cert: str
    tls_key: str
    kcp_addr: str
    kcp_contract: str = "v2"
    webhook_port: int = 8443
    metrics_port: int = 2112
    bind_address: str = "0.0.0.0"
    heartbeat_interval: float = 30.0
    send_queue_size: int = 1000
    backoff_initial: float = 0.1
    backoff_max: float = 30.0
    kcp_timeout: float = 10.0
    kcp_keep_alive: bool = True
    cert_reload_interval: float = 5.0
    shutdown_timeout: float = 10.0
    max_request_bytes: int = 16 * 1024 * 1024
    idle_timeout: float = 120.0
    watcher_version: str = VERSION
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check cross-field rules; raises :class:`ConfigError` naming the offending variable."""
        split_host_port(self.kcp_addr)
        if self.kcp_contract not in CONTRACTS:
            raise ConfigError(
                "KCP_CONTRACT", f"must be one of {', '.join(CONTRACTS)}, got {self.kcp_contract!r}"
            )
        for variable, port in (("WEBHOOK_PORT", self.webhook_port), ("METRICS_PORT", self.metrics_port)):
            if not 0 <= port <= 65535:
                raise ConfigError(variable, f"port {port} out of range 0..65535")
        if self.webhook_port and self.webhook_port == self.metrics_port:
            raise ConfigError("METRICS_PORT", f"must differ from WEBHOOK_PORT ({self.webhook_port})")
        if self.send_queue_size < 1:
            raise ConfigError("SEND_QUEUE_SIZE", "must be at least 1")
        if not 0 < self.backoff_initial <= self.backoff_max:
            raise ConfigError("BACKOFF_INITIAL", "must be > 0 and not above BACKOFF_MAX")
        if self.cert_reload_interval <= 0:
            raise ConfigError("CERT_RELOAD_INTERVAL", "must be positive")
        if self.heartbeat_interval < 0:
            raise ConfigError("HEARTBEAT_INTERVAL", "must not be negative (0 disables heartbeats)")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError("LOG_LEVEL", f"must be one of {', '.join(LOG_LEVELS)}")
        try:
            ipaddress.ip_address(self.bind_address)
        except ValueError:
            raise ConfigError("BIND_ADDRESS", f"not an IP address: {self.bind_address!r}") from None

    @property
    def kcp_host(self) -> str:
        return split_host_port(self.kcp_addr)[0]

    @property
    def kcp_port(self) -> int:
        return split_host_port(self.kcp_addr)[1]

    def replace(self, **changes: object) -> Config:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def describe(self) -> dict[str, object]:
        """The settings for the startup log line (paths only: file contents are never logged)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Config:
        """Read and validate all settings; the first problem raises :class:`ConfigError`."""
        ports = {}
        for variable, default in (("WEBHOOK_PORT", 8443), ("METRICS_PORT", 2112)):
            raw = env.get(variable, "").strip()
            ports[variable] = parse_port(raw, variable=variable) if raw else default
        log_level = env.get("LOG_LEVEL", "INFO").strip().upper() or "INFO"
        return cls(
            ca_cert=_required(env, "CA_CERT"),
            tls_cert=_required(env, "TLS_CERT"),
            tls_key=_required(env, "TLS_KEY"),
            kcp_addr=_required(env, "KCP_ADDR"),
            kcp_contract=env.get("KCP_CONTRACT", "").strip() or "v2",
            webhook_port=ports["WEBHOOK_PORT"],
            metrics_port=ports["METRICS_PORT"],
            bind_address=env.get("BIND_ADDRESS", "").strip() or "0.0.0.0",
            heartbeat_interval=_number(env, "HEARTBEAT_INTERVAL", 30.0, low=0, high=86400),
            send_queue_size=_integer(env, "SEND_QUEUE_SIZE", 1000, low=1, high=1_000_000),
            backoff_initial=_number(env, "BACKOFF_INITIAL", 0.1, low=0.001, high=3600),
            backoff_max=_number(env, "BACKOFF_MAX", 30.0, low=0.001, high=3600),
            kcp_timeout=_number(env, "KCP_TIMEOUT", 10.0, low=0.1, high=600),
            kcp_keep_alive=_boolean(env, "KCP_KEEP_ALIVE", True),
            cert_reload_interval=_number(env, "CERT_RELOAD_INTERVAL", 5.0, low=0.01, high=3600),
            shutdown_timeout=_number(env, "SHUTDOWN_TIMEOUT", 10.0, low=0, high=3600),
            max_request_bytes=_integer(env, "MAX_REQUEST_BYTES", 16 * 1024 * 1024, low=1024, high=1 << 30),
            idle_timeout=_number(env, "IDLE_TIMEOUT", 120.0, low=1, high=86400),
            watcher_version=env.get("WATCHER_VERSION", "").strip() or VERSION,
            log_level=log_level,
        )
