"""``watcher_fips_mode`` (upstream's gauge: 0 off, 1 on, 2 only) reports what the OpenSSL behind
the watcher's TLS really enforces; OpenSSL is configured here through ``OPENSSL_CONF`` in a child."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from watchers.runtime import WatcherServer
from watchers.runtime.fips import fips_mode

ROOT = Path(__file__).resolve().parents[3]

REQUIRE_FIPS = """openssl_conf = openssl_init
[openssl_init]
alg_section = evp_properties
[evp_properties]
default_properties = fips=yes
"""
# Only the base provider (encoders, no algorithms) besides the property: nothing non-FIPS loads.
FIPS_ONLY = """openssl_conf = openssl_init
[openssl_init]
providers = provider_sect
alg_section = evp_properties
[provider_sect]
base = base_sect
[base_sect]
activate = 1
[evp_properties]
default_properties = fips=yes
"""
PLAIN = "openssl_conf = openssl_init\n[openssl_init]\n"


def mode_in_child(tmp_path: Path, config: str) -> int:
    path = tmp_path / "openssl.cnf"
    path.write_text(config)
    done = subprocess.run(
        [sys.executable, "-c", "from watchers.runtime.fips import fips_mode; print(fips_mode())"],
        cwd=ROOT,
        env={**os.environ, "OPENSSL_CONF": str(path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(done.stdout)


@pytest.mark.parametrize(("config", "expected"), [(PLAIN, 0), (REQUIRE_FIPS, 1), (FIPS_ONLY, 2)])
def test_the_mode_follows_the_openssl_configuration(tmp_path, config, expected):
    assert mode_in_child(tmp_path, config) == expected


def test_given_a_running_watcher_when_scraping_then_watcher_fips_mode_is_a_gauge(watcher: WatcherServer):
    url = f"http://127.0.0.1:{watcher.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    family = {f.name: f for f in text_string_to_metric_families(text)}["watcher_fips_mode"]
    assert family.type == "gauge"
    [sample] = family.samples
    assert sample.value == fips_mode()  # 0 unless this machine's OpenSSL requires FIPS
