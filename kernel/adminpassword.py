"""The generated administrator password: shown in a box and kept in ``STATE_DIR/admin-password``.

``make run`` prints it before dozens of start-up lines scroll it away, so it is also written to a
file only its owner can read (mode 0600), and ``up`` reminds where it is once start-up is done.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

FILENAME = "admin-password"


def admin_password_path() -> Path:
    return Path(settings.STATE_DIR) / FILENAME


def admin_password_write(password: str) -> Path:
    """Write the password to the state directory, readable by its owner only; returns the path."""
    path = admin_password_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    path.chmod(0o600)  # an older file keeps its mode through O_CREAT
    return path


def box(lines: list[str]) -> str:
    """Lines framed so they stand out among the roles' start-up output."""
    width = max(len(line) for line in lines)
    edge = "+" + "-" * (width + 2) + "+"
    return "\n".join([edge, *(f"| {line.ljust(width)} |" for line in lines), edge])


def admin_password_reminder(username: str = "admin") -> str | None:
    """The reminder ``up`` prints at the end of start-up, when a generated password is on file."""
    path = admin_password_path()
    if not path.exists():
        return None
    return box([f"Administrator password (user {username!r}) is in:", str(path)])
