"""A bad production setting stops every entry point with one line naming it, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINTS = {
    "manage.py": [sys.executable, "manage.py", "check"],
    "celery": [sys.executable, "-m", "celery", "-A", "controlplane", "inspect", "ping"],
}


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CONTROLPLANE_"))}
    clean.update(DJANGO_SETTINGS_MODULE="controlplane.settings", **env)
    return subprocess.run(argv, cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "DJANGO_SECRET_KEY"),
        ({"DJANGO_SECRET_KEY": "k" * 60}, "CONTROLPLANE_ENCRYPTION_KEYS"),
        ({"DJANGO_SECRET_KEY": "k" * 60, "CONTROLPLANE_ENCRYPTION_KEYS": "not-a-key"}, "Fernet"),
    ],
    ids=["no secret key", "no encryption key", "bad encryption key"],
)
def test_a_bad_production_setting_is_one_line_naming_it(entry, env, named):
    done = run(ENTRY_POINTS[entry], DJANGO_DEBUG="0", **env)

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("configuration error: ")
    assert named in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
