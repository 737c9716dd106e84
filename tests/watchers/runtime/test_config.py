"""Settings: parsing rules in-process, and the real CLI refusing bad settings (subprocesses)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pki.crypto import certificate_to_pem, private_key_to_pem
from tests.watchers.runtime.support import Pki, TlsFiles
from watchers.runtime import Config, ConfigError
from watchers.runtime.config import split_host_port

REPO = Path(__file__).resolve().parents[3]
BASE = {"CA_CERT": "/ca", "TLS_CERT": "/crt", "TLS_KEY": "/key", "KCP_ADDR": "kcp.example.com:443"}


def test_defaults_match_upstream_plus_ours():
    config = Config.from_env(BASE)
    assert (config.webhook_port, config.metrics_port, config.kcp_contract) == (8443, 2112, "v2")
    assert (config.heartbeat_interval, config.send_queue_size, config.bind_address) == (30, 1000, "0.0.0.0")
    assert (config.kcp_host, config.kcp_port) == ("kcp.example.com", 443)


def test_all_settings_are_read():
    env = {
        **BASE,
        "WEBHOOK_PORT": "9443",
        "METRICS_PORT": "9090",
        "KCP_CONTRACT": "v1",
        "HEARTBEAT_INTERVAL": "0",
        "SEND_QUEUE_SIZE": "5",
        "BIND_ADDRESS": "127.0.0.1",
        "KCP_KEEP_ALIVE": "false",
        "LOG_LEVEL": "debug",
    }
    config = Config.from_env(env)
    assert (config.webhook_port, config.metrics_port, config.kcp_contract) == (9443, 9090, "v1")
    assert (config.heartbeat_interval, config.send_queue_size, config.bind_address) == (0, 5, "127.0.0.1")
    assert (config.kcp_keep_alive, config.log_level) == (False, "DEBUG")


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"CA_CERT": ""}, "CA_CERT"),
        ({"TLS_CERT": " "}, "TLS_CERT"),
        ({"TLS_KEY": ""}, "TLS_KEY"),
        ({"KCP_ADDR": ""}, "KCP_ADDR"),
        ({"KCP_ADDR": "https://kcp.example.com"}, "KCP_ADDR"),
        ({"KCP_ADDR": "kcp:99999"}, "KCP_ADDR"),
        ({"KCP_ADDR": "::1:443"}, "KCP_ADDR"),
        ({"KCP_CONTRACT": "v3"}, "KCP_CONTRACT"),
        ({"WEBHOOK_PORT": "invalid value"}, "WEBHOOK_PORT"),
        ({"WEBHOOK_PORT": "65536"}, "WEBHOOK_PORT"),
        ({"WEBHOOK_PORT": "0"}, "WEBHOOK_PORT"),
        ({"METRICS_PORT": "-1"}, "METRICS_PORT"),
        ({"METRICS_PORT": "8443"}, "METRICS_PORT"),
        ({"HEARTBEAT_INTERVAL": "-1"}, "HEARTBEAT_INTERVAL"),
        ({"SEND_QUEUE_SIZE": "0"}, "SEND_QUEUE_SIZE"),
        ({"KCP_KEEP_ALIVE": "maybe"}, "KCP_KEEP_ALIVE"),
        ({"BIND_ADDRESS": "everywhere"}, "BIND_ADDRESS"),
        ({"LOG_LEVEL": "chatty"}, "LOG_LEVEL"),
    ],
)
def test_bad_settings_name_the_variable(changes, variable):
    with pytest.raises(ConfigError) as info:
        Config.from_env({**BASE, **changes})
    assert info.value.variable == variable
    assert str(info.value).startswith(f"{variable}: ")


def test_host_port_forms():
    assert split_host_port("localhost:8080") == ("localhost", 8080)
    assert split_host_port("[::1]:8443") == ("::1", 8443)
    assert split_host_port("kcp.example.com") == ("kcp.example.com", 443)


# ----------------------------------------------------------------------------- the real CLI


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", "watchers.runtime", *args],
        env=full,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _cases(files: TlsFiles, tmp: Path, pki: Pki, busy_port: int) -> dict[str, tuple[dict[str, str], str]]:
    good = {
        "CA_CERT": str(files.ca),
        "TLS_CERT": str(files.cert),
        "TLS_KEY": str(files.key),
        "KCP_ADDR": "localhost:1",
        "BIND_ADDRESS": "127.0.0.1",
        "WEBHOOK_PORT": str(free_port()),
        "METRICS_PORT": str(free_port()),
    }
    garbage = tmp / "garbage.pem"
    garbage.write_text("this is not PEM\n")
    empty = tmp / "empty.pem"
    empty.write_text("")
    other_key = tmp / "other.key"
    other_key.write_bytes(private_key_to_pem(pki.runtime_rotated.private_key))
    key_as_cert = tmp / "key-as-cert.pem"
    key_as_cert.write_bytes(private_key_to_pem(pki.runtime.private_key))
    broken_cert = tmp / "broken.crt"
    broken_cert.write_bytes(
        certificate_to_pem(pki.runtime.certificate)[:200] + b"\n-----END CERTIFICATE-----\n"
    )

    def without(name: str) -> dict[str, str]:
        return {k: v for k, v in good.items() if k != name}

    return {
        "missing CA_CERT": (without("CA_CERT"), "CA_CERT"),
        "missing TLS_CERT": (without("TLS_CERT"), "TLS_CERT"),
        "missing TLS_KEY": (without("TLS_KEY"), "TLS_KEY"),
        "missing KCP_ADDR": (without("KCP_ADDR"), "KCP_ADDR"),
        "unparsable port": ({**good, "WEBHOOK_PORT": "https"}, "WEBHOOK_PORT"),
        "port out of range": ({**good, "METRICS_PORT": "70000"}, "METRICS_PORT"),
        "unknown contract": ({**good, "KCP_CONTRACT": "v9"}, "KCP_CONTRACT"),
        "unreadable cert": ({**good, "TLS_CERT": str(tmp / "nope.crt")}, "TLS_CERT"),
        "cert is not PEM": ({**good, "TLS_CERT": str(garbage)}, "TLS_CERT"),
        "cert is a key": ({**good, "TLS_CERT": str(key_as_cert)}, "TLS_CERT"),
        "truncated cert": ({**good, "TLS_CERT": str(broken_cert)}, "TLS_CERT"),
        "key is not PEM": ({**good, "TLS_KEY": str(garbage)}, "TLS_KEY"),
        "key does not match": ({**good, "TLS_KEY": str(other_key)}, "TLS_KEY"),
        "empty CA": ({**good, "CA_CERT": str(empty)}, "CA_CERT"),
        "CA is not PEM": ({**good, "CA_CERT": str(garbage)}, "CA_CERT"),
        "webhook port busy": ({**good, "WEBHOOK_PORT": str(busy_port)}, "WEBHOOK_PORT"),
    }


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory: pytest.TempPathFactory, pki: Pki):
    """Run every bad configuration as its own process, four at a time (16 interpreters starting at
    once on 2 busy cores took longer than the timeout)."""
    tmp = tmp_path_factory.mktemp("cli")
    files = TlsFiles.write(tmp / "tls", pki.bundle_pem, pki.runtime)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        cases = _cases(files, tmp, pki, busy.getsockname()[1])
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {name: pool.submit(run_cli, env) for name, (env, _) in cases.items()}
            yield {name: (future.result(), cases[name][1]) for name, future in futures.items()}


CASE_NAMES = [
    "missing CA_CERT",
    "missing TLS_CERT",
    "missing TLS_KEY",
    "missing KCP_ADDR",
    "unparsable port",
    "port out of range",
    "unknown contract",
    "unreadable cert",
    "cert is not PEM",
    "cert is a key",
    "truncated cert",
    "key is not PEM",
    "key does not match",
    "empty CA",
    "CA is not PEM",
    "webhook port busy",
]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_cli_refuses_bad_settings_with_one_line(cli_results, case):
    result, variable = cli_results[case]
    assert result.returncode == 2, result.stderr
    # exactly one plain-text line: the error (a bind failure may follow a JSON "tls material loaded")
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("{")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("runtime-watcher: configuration error: " + variable + ":"), lines[0]
    assert result.stderr.strip().splitlines()[-1] == lines[0]
    assert "Traceback" not in result.stderr
    assert "BEGIN" not in result.stderr  # never echo PEM material


def test_cli_version():
    result = run_cli({"WATCHER_VERSION": "1.2.3"}, "--version")
    assert result.returncode == 0
    assert result.stdout.strip() == "Runtime Watcher version: 1.2.3"


def test_runtime_package_imports_only_stdlib_and_prometheus_client():
    """The image ships nothing else: importing the watcher must not pull in Django or project code."""
    probe = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import watchers.runtime.__main__\n"
        "new = set(sys.modules) - before\n"
        "ok = set(sys.stdlib_module_names) | {'prometheus_client', 'watchers'}\n"
        "print(sorted({m.split('.')[0] for m in new} - ok))\n"
        "print(sorted(m for m in new if m.startswith('watchers.') and m[9:16] != 'runtime'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["[]", "[]"]
