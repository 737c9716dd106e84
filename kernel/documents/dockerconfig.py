"""Docker config JSON files (``.dockerconfigjson``), the content of image pull secrets.

Read where they are used (a rotated file is picked up without a restart) and checked the way the
API server checks a ``kubernetes.io/dockerconfigjson`` Secret: valid JSON with an ``auths`` map.
Messages name the file, never its content (it holds registry credentials).
"""

from __future__ import annotations

import json


class DockerConfigError(ValueError):
    """The file cannot serve as an image pull secret; the message says why."""


def read_docker_config(path: str) -> bytes:
    """The file's bytes, once they are known to be a docker config JSON."""
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except OSError as exc:
        raise DockerConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        config = json.loads(content)
    except (UnicodeDecodeError, ValueError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise DockerConfigError(f"{path} is not valid JSON{where}") from None
    if not isinstance(config, dict) or not isinstance(config.get("auths"), dict):
        raise DockerConfigError(f'{path} is not a docker config JSON (it needs an "auths" object)')
    return content
