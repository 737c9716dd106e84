"""``manage.py serve web|listener [--bind HOST:PORT]``: one role under gunicorn, with our config."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from listener.tls import prepare_listener_tls

CONFIGS = {
    "web": settings.BASE_DIR / "deploy" / "gunicorn" / "web.py",
    "listener": settings.BASE_DIR / "deploy" / "gunicorn" / "listener.py",
}


WSGI_APPS = {"web": "controlplane.wsgi:application", "listener": "listener.wsgi:application"}
ROLE_SETTINGS = {
    "web": ("WEB_BIND", "WEB_WORKERS", "WEB_WATCH_THREADS"),
    "listener": (
        "LISTENER_BIND",
        "LISTENER_WORKERS",
        "LISTENER_THREADS",
        "LISTENER_METRICS_BIND",
        "LISTENER_TRUSTED_PROXIES",
        "LISTENER_MODE",
    ),
}


def _check_bind(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise CommandError(f"--bind must be HOST:PORT with a port from 1 to 65535, got {value!r}")
    return value


class Command(BaseCommand):
    help = "Serve the web role (admin, API) or the listener role (WatchEvents over mTLS) with gunicorn."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("role", choices=sorted(CONFIGS), help="which HTTP role this process serves")
        parser.add_argument("--bind", help="HOST:PORT (default: WEB_BIND or LISTENER_BIND)")

    def handle(self, *args: Any, **options: Any) -> None:
        role = options["role"]
        config = CONFIGS[role]
        if not config.exists():
            raise CommandError(f"missing gunicorn config {config}")
        env = dict(os.environ, CONTROLPLANE_ROLE=role)
        env.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
        # The gunicorn config reads the environment: hand it the effective settings.
        for name in ROLE_SETTINGS[role]:
            value = getattr(settings, name)
            env[name] = ",".join(value) if isinstance(value, list) else str(value)
        if options["bind"]:
            env["WEB_BIND" if role == "web" else "LISTENER_BIND"] = _check_bind(options["bind"])
        if role == "listener":
            env.update(prepare_listener_tls())
        bind = env["WEB_BIND" if role == "web" else "LISTENER_BIND"]
        # One directory per instance: replicas on one host (manage.py up --replicas) must not
        # clear each other's metrics files.
        metrics_dir = settings.STATE_DIR / "prometheus" / f"{role}-{bind.rpartition(':')[2]}"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        env.setdefault("PROMETHEUS_MULTIPROC_DIR", str(metrics_dir))
        argv = [sys.executable, "-m", "gunicorn", "-c", str(config), WSGI_APPS[role]]
        sys.stdout.flush()
        os.execvpe(argv[0], argv, env)
