"""Images for the node stand-in, built the way their Dockerfiles say, without a container engine.

An :class:`Image` is what a container needs of one: the application directory the Dockerfile fills
(mounted at ``/app``), its virtualenv (at ``/opt/venv``), its ``ENV``, ``WORKDIR``, ``ENTRYPOINT``
and ``CMD``. :func:`build_image` reads the Dockerfile itself, so a file the Dockerfile forgets to
copy is missing in the pods too:

- ``COPY <src> <dst>`` from the build context (every stage; ``COPY --from`` of a stage is the
  result of those), ``ENV``, ``ARG``, ``WORKDIR``, ``ENTRYPOINT`` and ``CMD`` of the last stage;
- ``RUN pip install -r <file>`` or ``RUN pip install <pinned packages>``: a virtualenv of this
  machine's Python 3.11 with exactly those (first on the image's ``PATH``, where the base
  image's Python would be), cached outside the repository by what it holds
  (``~/.cache/kyma-controlplane/venvs/<digest>``), so the first build downloads from PyPI and the
  next ones take a moment;
- the one other ``RUN`` that shapes the image, ``manage.py collectstatic`` into ``/app/static``,
  is done as the Dockerfile does it (production settings, throwaway keys); the rest of the
  ``RUN`` lines (users, ``compileall``, cleaning ``__pycache__``) change nothing a test sees.

The base image is this machine's root file system (``envtest.container``), not
``python:3.11-slim``: the same Python minor version, other system libraries. :class:`Images` is the
registry a node pulls from: an image it does not know is an ``ErrImagePull``.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kyma-controlplane" / "venvs"
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
# The base image's PATH: its Python is this machine's with the image's packages, i.e. the
# virtualenv at /opt/venv (an image that installs into the base Python finds them there too).
BASE_PATH = "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class Image:
    ref: str
    app: Path
    venv: Path
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()


class Images:
    """The registry stand-in: image references to built images."""

    def __init__(self) -> None:
        self._images: dict[str, Image] = {}

    def add(self, image: Image, *refs: str) -> None:
        for ref in (image.ref, *refs):
            self._images[ref] = image

    def get(self, ref: str) -> Image | None:
        return self._images.get(ref)

    def refs(self) -> list[str]:
        return sorted(self._images)


def dev_image(ref: str, root: Path) -> Image:
    """The working tree and this virtualenv as an image (the kube tier's runtime watcher: no build)."""
    return Image(
        ref=ref,
        app=root,
        venv=Path(sys.prefix),
        env={"PATH": "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin", "PYTHONUNBUFFERED": "1"},
        workdir="/app",
    )


# --- the Dockerfile ---------------------------------------------------------------------------------


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines, current = [], ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        word, _, rest = current.strip().partition(" ")
        lines.append((word.upper(), rest.strip()))
        current = ""
    return lines


def _expand(value: str, variables: dict[str, str]) -> str:
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), value
    )


def _env_pairs(arguments: str) -> list[tuple[str, str]]:
    words = shlex.split(arguments)
    if len(words) == 2 and "=" not in words[0]:
        return [(words[0], words[1])]
    return [tuple(word.split("=", 1)) for word in words]  # type: ignore[misc]


def _json_or_shell(arguments: str) -> tuple[str, ...]:
    if arguments.startswith("["):
        return tuple(json.loads(arguments))
    return ("/bin/sh", "-c", arguments)


def build_image(
    ref: str,
    *,
    dockerfile: Path,
    context: Path,
    dest: Path,
    build_args: dict[str, str] | None = None,
) -> Image:
    """Build ``dockerfile`` with ``context`` into ``dest`` (see the module docstring)."""
    app = dest / "app"
    if app.exists():
        shutil.rmtree(app)
    app.mkdir(parents=True)
    variables: dict[str, str] = {"PATH": BASE_PATH}
    env: dict[str, str] = {}
    args = dict(build_args or {})
    workdir, entrypoint, cmd = "/", (), ()
    requirements: list[str] = []
    collectstatic = False
    for instruction, arguments in _instructions(dockerfile):
        if instruction == "FROM":  # a new stage: its environment starts afresh
            env, workdir, entrypoint, cmd = {}, "/", (), ()
            variables = {"PATH": BASE_PATH, **args}
        elif instruction == "ARG":
            name, _, default = arguments.partition("=")
            args.setdefault(name, default)
            variables[name] = args[name]
        elif instruction == "ENV":
            for name, value in _env_pairs(arguments):
                env[name] = variables[name] = _expand(value, variables)
        elif instruction == "WORKDIR":
            workdir = arguments
        elif instruction == "ENTRYPOINT":
            entrypoint = _json_or_shell(arguments)
        elif instruction == "CMD":
            cmd = _json_or_shell(arguments)
        elif instruction == "COPY" and not arguments.startswith("--from"):
            source, target = arguments.split()
            _copy(context / source, app, target, workdir)
        elif instruction == "RUN":
            requirements += _pip_requirements(arguments, context)
            collectstatic |= "collectstatic" in arguments
    env.setdefault("PATH", variables["PATH"])
    venv = virtualenv(requirements)
    if collectstatic:
        _collectstatic(app, venv)
    return Image(ref, app, venv, env, workdir, entrypoint, cmd)


def _copy(source: Path, app: Path, target: str, workdir: str) -> None:
    target = target if target.startswith("/") else f"{workdir.rstrip('/')}/{target}"
    if not target.startswith("/app"):
        return  # /tmp/requirements.txt and the like: read by RUN lines, not part of the app
    destination = app / target.removeprefix("/app").lstrip("/")
    if source.is_dir():
        shutil.copytree(source, destination, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)


def _pip_requirements(command: str, context: Path) -> list[str]:
    words = shlex.split(command)
    if "pip" not in words or "install" not in words:
        return []
    found: list[str] = []
    rest = words[words.index("install") + 1 :]
    for index, word in enumerate(rest):
        if word == "-r":
            path = Path(rest[index + 1])
            found += _requirements_file(context / path.name)
        elif "==" in word and not word.startswith("-"):
            found.append(word)
    return found


def _requirements_file(path: Path) -> list[str]:
    return [
        line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()
    ]


def virtualenv(requirements: list[str]) -> Path:
    """A virtualenv with exactly ``requirements``, made once per set (and Python) and cached."""
    digest = hashlib.sha256("\n".join([BASE_PYTHON, *sorted(requirements)]).encode()).hexdigest()[:16]
    target = CACHE / f"py311-{digest}"
    if (target / ".complete").exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building the same one
        if (target / ".complete").exists():
            return target
        # A virtualenv is not relocatable (its scripts name its path): it is made where it stays,
        # and marked complete last, so a build cut short is made again.
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run([BASE_PYTHON, "-m", "venv", str(target)], check=True, capture_output=True)
        if requirements:
            done = subprocess.run(
                [str(target / "bin" / "python"), "-m", "pip", "install", "--quiet",
                 "--disable-pip-version-check", *requirements],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"pip install for an image failed:\n{done.stderr[-2000:]}")
        (target / ".complete").write_text("\n".join(requirements) + "\n")
    return target


def _collectstatic(app: Path, venv: Path) -> None:
    """The Dockerfile's collectstatic: production settings, throwaway keys, into /app/static."""
    with tempfile.TemporaryDirectory() as state:
        env = {
            "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
            "CONTROLPLANE_ENCRYPTION_KEYS": _fernet_key(),
            "DJANGO_ALLOWED_HOSTS": "build.invalid",
            "CONTROLPLANE_STATE_DIR": state,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        done = subprocess.run(
            [str(venv / "bin" / "python"), "manage.py", "collectstatic", "--noinput"],
            cwd=app, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"collectstatic for the image failed:\n{done.stderr[-2000:]}")
        shutil.move(str(Path(state) / "static"), str(app / "static"))


def _fernet_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()
