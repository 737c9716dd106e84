"""``make images`` builds both images with whichever engine can build, and says so where none can.

The engines are stood in for by scripts on ``PATH`` that record how they were called: a container
engine is outside this repository (this machine has the docker client and no daemon)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = """#!/bin/sh
echo "$0 $*" >> "{log}"
case "$1" in info) exit {info};; build) exit 0;; esac
exit 1
"""


def make_images(
    tmp_path: Path, engines: dict[str, int], **variables: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``make images`` with only the given engines on PATH (name -> exit status of ``info``)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name, info in engines.items():
        script = bin_dir / name
        script.write_text(ENGINE.format(log=log, info=info))
        script.chmod(0o755)
    make = subprocess.run(
        ["sh", "-c", "command -v make"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    args = [make, "--no-print-directory", "images", *(f"{k}={v}" for k, v in variables.items())]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    calls = [line.split(" ", 1)[1] for line in log.read_text().splitlines()] if log.exists() else []
    return done, calls


@pytest.mark.parametrize(
    "engines", [{}, {"docker": 1}], ids=["no engine", "a docker client without its daemon"]
)
def test_without_an_engine_that_can_build_it_says_so_and_builds_nothing(tmp_path, engines):
    done, calls = make_images(tmp_path, engines)
    assert done.returncode == 0
    assert "no container engine to build with" in done.stdout
    assert not [c for c in calls if c.startswith("build")]


def test_with_docker_both_images_are_built_from_the_repository_root(tmp_path):
    done, calls = make_images(
        tmp_path, {"docker": 0}, IMAGE_REGISTRY="registry.example.com/kcp", IMAGE_TAG="1.2.3"
    )
    assert done.returncode == 0, done.stderr
    builds = [c for c in calls if c.startswith("build")]
    assert builds == [
        "build -f deploy/controlplane/Dockerfile -t registry.example.com/kcp/controlplane:1.2.3 .",
        (
            "build -f deploy/runtime-watcher/Dockerfile --build-arg WATCHER_VERSION=1.2.3 "
            "-t registry.example.com/kcp/runtime-watcher:1.2.3 ."
        ),
    ]


def test_podman_builds_where_docker_cannot(tmp_path):
    done, calls = make_images(tmp_path, {"docker": 1, "podman": 0})
    assert done.returncode == 0, done.stderr
    assert "with podman" in done.stdout
    assert len([c for c in calls if c.startswith("build")]) == 2
