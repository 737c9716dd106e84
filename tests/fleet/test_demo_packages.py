"""Where the development packages are missing (the production image), the demo says what to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from django.conf import settings

HIDE_DEV_PACKAGES = textwrap.dedent(
    """
    import sys
    for name in ("runtime_emulator", "kmock", "demo"):
        sys.modules[name] = None  # find_spec() and import both see the package as absent
    import os
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.core.management import execute_from_command_line
    execute_from_command_line(["manage.py", *sys.argv[1:]])
    """
)


def _manage_without_dev_packages(*args: str, tmp_path) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "CONTROLPLANE_STATE_DIR": str(tmp_path),
        "PYTHONPATH": str(settings.BASE_DIR),
    }
    return subprocess.run(
        [sys.executable, "-c", HIDE_DEV_PACKAGES, *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_given_no_dev_packages_when_demo_runs_then_it_stops_with_one_line_naming_what_to_install(tmp_path):
    result = _manage_without_dev_packages("demo", tmp_path=tmp_path)

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        (
            "CommandError: simulated runtimes need the development packages (runtime_emulator, kmock): "
            "pip install -r requirements-dev.txt from a checkout of the repository"
        )
    ]


def test_given_no_dev_packages_when_up_starts_with_the_demo_then_it_stops_before_starting_any_role(tmp_path):
    result = _manage_without_dev_packages("up", tmp_path=tmp_path)

    assert result.returncode == 1
    assert "Starting the control plane" not in result.stdout
    assert "pip install -r requirements-dev.txt" in result.stderr
    assert "manage.py up --no-demo" in result.stderr


def test_given_the_dev_packages_then_the_demo_app_is_installed():
    assert "demo" in settings.INSTALLED_APPS
