"""Production mode refuses unsafe configuration and passes Django's deployment checks."""

from __future__ import annotations

import os
import subprocess
import sys

from cryptography.fernet import Fernet
from django.conf import settings

PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "p" * 30 + "-r4nd0m-" + "q" * 30,
    "CONTROLPLANE_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
    "DJANGO_ALLOWED_HOSTS": "cp.example.com",
}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CONTROLPLANE_ENCRYPTION"))}
    base.update(
        env, DJANGO_SETTINGS_MODULE="controlplane.settings", CONTROLPLANE_STATE_DIR=str(settings.STATE_DIR)
    )
    return subprocess.run(
        [sys.executable, str(settings.BASE_DIR / "manage.py"), *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_given_production_without_secret_key_when_starting_then_it_refuses():
    result = manage("check", env={**PRODUCTION, "DJANGO_SECRET_KEY": ""})
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_given_production_without_encryption_keys_when_starting_then_it_refuses():
    env = {k: v for k, v in PRODUCTION.items() if k != "CONTROLPLANE_ENCRYPTION_KEYS"}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "CONTROLPLANE_ENCRYPTION_KEYS must list at least one Fernet key" in result.stderr


def test_given_production_with_a_broken_encryption_key_when_starting_then_it_refuses():
    result = manage("check", env={**PRODUCTION, "CONTROLPLANE_ENCRYPTION_KEYS": "not-a-key"})
    assert result.returncode != 0
    assert "invalid Fernet key" in result.stderr


def test_given_full_production_configuration_when_checking_deploy_then_no_warnings():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
