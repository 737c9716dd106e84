"""deploy/controlplane/Dockerfile: read as Docker would, and its static-files step run for real.

Docker cannot run here, so the Dockerfile is parsed (continuation lines joined, stages split) and
checked for what matters: what it installs, who it runs as, what reaches the final image's
environment. The collectstatic step and the web pods' symlink to its output are reproduced with
the same settings and served through Django and WhiteNoise in a separate process.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.deploy.manifests import BASE, DOCKERFILE, ROOT, load

BUILD_ONLY = ("DJANGO_SECRET_KEY", "CONTROLPLANE_ENCRYPTION_KEYS", "DJANGO_ALLOWED_HOSTS", "DJANGO_DEBUG")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, comments dropped and continuation lines joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def stages(text: str) -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in instructions(text):
        if instruction[0] == "FROM":
            found.append([])
        found[-1].append(instruction)
    return found


DOCKER = DOCKERFILE.read_text()
STAGES = stages(DOCKER)
FINAL = STAGES[-1]


def _env_names(stage: list[tuple[str, str]]) -> set[str]:
    names: set[str] = set()
    for keyword, rest in stage:
        if keyword in ("ENV", "ARG"):
            names.update(token.split("=", 1)[0] for token in shlex.split(rest))
    return names


def test_it_is_multi_stage_on_python_3_11_slim():
    assert len(STAGES) >= 2
    for stage in STAGES:
        assert stage[0][1].split()[0].startswith("python:3.11-slim")


def test_the_final_image_runs_as_a_non_root_user():
    users = [rest for keyword, rest in FINAL if keyword == "USER"]
    assert users, "no USER in the final stage"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric non-root uid lets Kubernetes verify runAsNonRoot"
    (web,) = [d for d in load(BASE / "web.yaml") if d["kind"] == "Deployment"]
    assert web["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_only_the_pinned_runtime_requirements_are_installed():
    runs = [rest for stage in STAGES for keyword, rest in stage if keyword == "RUN"]
    installs = [run for run in runs if "pip install" in run]
    assert installs == ["pip install --no-cache-dir -r /tmp/requirements.txt"]
    copies = [rest for stage in STAGES for keyword, rest in stage if keyword == "COPY"]
    assert "requirements.txt /tmp/requirements.txt" in copies
    assert "requirements-dev" not in DOCKER
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert "==" in line, f"requirements.txt: {line!r} is not pinned"


def test_every_copied_path_exists_in_the_build_context():
    for stage in STAGES:
        for keyword, rest in stage:
            if keyword == "COPY" and not rest.startswith("--from"):
                source = rest.split()[0]
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"


def test_build_time_secrets_never_reach_the_final_image():
    assert not _env_names(FINAL) & set(BUILD_ONLY)
    for stage in STAGES:
        assert not _env_names(stage) & {"DJANGO_SECRET_KEY", "CONTROLPLANE_ENCRYPTION_KEYS"}
    (collect,) = [rest for keyword, rest in STAGES[0] if keyword == "RUN" and "collectstatic" in rest]
    for name in BUILD_ONLY:
        assert f"{name}=" in collect, f"collectstatic runs without {name}"


def test_output_is_unbuffered_and_the_state_dir_matches_the_manifests():
    env = dict(token.split("=", 1) for k, rest in FINAL if k == "ENV" for token in shlex.split(rest))
    assert env["PYTHONUNBUFFERED"] == "1"
    (config,) = load(BASE / "configmap.yaml")
    assert env["CONTROLPLANE_STATE_DIR"] == config["data"]["CONTROLPLANE_STATE_DIR"]


def test_no_role_is_started_by_default_and_every_role_is_documented():
    assert not [k for k, _ in FINAL if k == "ENTRYPOINT"]
    (cmd,) = [rest for keyword, rest in FINAL if keyword == "CMD"]
    argv = json.loads(cmd)
    assert argv[:2] != ["python", "manage.py"] and argv[0] != "celery"
    for command in (
        "python manage.py serve web",
        "python manage.py serve listener",
        "celery -A controlplane worker",
        "celery -A controlplane beat",
        "python manage.py migrate",
    ):
        assert command in DOCKER
        assert command in (DOCKERFILE.parent / "README.md").read_text()


def test_static_files_land_where_the_web_pods_link_from():
    (collect,) = [rest for keyword, rest in STAGES[0] if keyword == "RUN" and "collectstatic" in rest]
    assert "mv /tmp/build-state/static /app/static" in collect
    assert "CONTROLPLANE_STATE_DIR=/tmp/build-state" in collect


@pytest.fixture(scope="module")
def image_layout(tmp_path_factory) -> dict[str, Path]:
    """collectstatic as the build runs it, then the state dir as a web pod sees it."""
    root = tmp_path_factory.mktemp("image")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
        "CONTROLPLANE_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        "DJANGO_ALLOWED_HOSTS": "build.invalid",
        "CONTROLPLANE_STATE_DIR": str(root / "build-state"),
    }
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    app_static = root / "app-static"
    (root / "build-state" / "static").rename(app_static)
    state = root / "state"
    state.mkdir()
    subprocess.run(["ln", "-sfn", str(app_static), str(state / "static")], check=True)
    return {"env": env, "state": state, "static": app_static}


def test_collected_static_files_carry_the_hashed_manifest(image_layout):
    manifest = json.loads((image_layout["static"] / "staticfiles.json").read_text())
    assert "admin/css/base.css" in manifest["paths"]


def test_production_web_serves_admin_and_static_files_through_the_linked_state_dir(image_layout):
    script = textwrap.dedent(
        """
        import django
        django.setup()
        from django.templatetags.static import static
        from django.test import Client
        client = Client()
        css = static("admin/css/base.css")
        page = client.get("/admin/login/", secure=True)
        asset = client.get(css, secure=True)
        print(page.status_code, asset.status_code, css)
        """
    )
    env = dict(
        image_layout["env"],
        CONTROLPLANE_STATE_DIR=str(image_layout["state"]),
        DJANGO_ALLOWED_HOSTS="testserver",
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    page, asset, css = done.stdout.split()
    assert (page, asset) == ("200", "200")
    assert css != "/static/admin/css/base.css", "the hashed name comes from the manifest"


def test_every_installed_app_of_the_project_is_in_the_production_image():
    from django.conf import settings

    ours = {app.split(".")[0] for app in settings.INSTALLED_APPS if (ROOT / app.split(".")[0]).is_dir()}
    copied = {rest.split()[0].rstrip("/") for stage in STAGES for keyword, rest in stage if keyword == "COPY"}

    assert ours - {"demo"} <= copied, sorted(ours - {"demo"} - copied)
    assert {"kernel", "fleet", "controlplane"} <= ours


def test_test_and_demo_code_stays_out_of_the_production_image():
    copied = [rest.split()[0] for stage in STAGES for keyword, rest in stage if keyword == "COPY"]

    assert not [path for path in copied if path.startswith(("runtime_emulator", "demo", "tests", "bench"))]
    assert "requirements-dev.txt" not in " ".join(copied)


WATCHER_DOCKERFILE = ROOT / "deploy" / "runtime-watcher" / "Dockerfile"


def test_the_runtime_watcher_image_copies_the_repository_package_marker_not_a_stand_in():
    watcher_stages = stages(WATCHER_DOCKERFILE.read_text())
    copies = [rest for stage in watcher_stages for keyword, rest in stage if keyword == "COPY"]
    runs = " ".join(rest for stage in watcher_stages for keyword, rest in stage if keyword == "RUN")

    assert "watchers/__init__.py /app/watchers/__init__.py" in copies
    assert "__init__.py" not in runs


def test_the_watchers_package_marker_imports_nothing_the_watcher_image_lacks():
    source = (ROOT / "watchers" / "__init__.py").read_text()

    assert not [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Import | ast.ImportFrom)]
