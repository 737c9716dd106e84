"""``manage.py reencrypt``: re-encrypt every stored secret under the current primary key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from kernel.sealing import SealedSecretError, secrets_reencrypt


class Command(BaseCommand):
    help = (
        "After putting a new key first in CONTROLPLANE_ENCRYPTION_KEYS, re-encrypt all private keys and "
        "kubeconfigs with it; then the old key can be removed."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            done = secrets_reencrypt()
        except SealedSecretError as exc:
            raise CommandError(str(exc)) from exc
        for label, count in done.items():
            self.stdout.write(f"{label}: {count} row(s) re-encrypted")
        self.stdout.write(
            self.style.SUCCESS(f"{sum(done.values())} row(s) now encrypted with the primary key.")
        )
