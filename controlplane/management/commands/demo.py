"""``manage.py demo`` where the development packages are missing: one clear line, not a traceback.

The real command lives in the development-only ``demo`` app (installed by settings when
``runtime_emulator`` and ``kmock`` are importable), which Django finds first.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

MISSING = (
    "simulated runtimes need the development packages (runtime_emulator, kmock): "
    "pip install -r requirements-dev.txt from a checkout of the repository"
)


class Command(BaseCommand):
    help = "Simulated runtimes (needs the development packages)."

    def handle(self, *args: Any, **options: Any) -> None:
        raise CommandError(MISSING)
