"""``manage.py reencrypt``: re-encrypt every stored secret under the current primary key.

Recorded in the audit trail as the operating-system user's: one entry per model whose rows were
re-encrypted (how many; never a value), or the refusal with the row no key opens."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from kernel import audit
from kernel.sealing import SealedSecretError, secrets_reencrypt


class Command(BaseCommand):
    help = (
        "After putting a new key first in CONTROLPLANE_ENCRYPTION_KEYS, re-encrypt all private keys and "
        "kubeconfigs with it; then the old key can be removed."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        actor = audit.command_actor("manage.py reencrypt")

        def recorded(label: str, count: int) -> None:  # in the transaction of that model's rows
            if count:
                rows = [{"field": "rows", "before": None, "after": count}]
                audit.record(action="reencrypt", kind=label.rpartition(".")[2], changes=rows, actor=actor)

        try:
            done = secrets_reencrypt(recorded)
        except SealedSecretError as exc:
            audit.record_refusal(exc, action="reencrypt", actor=actor)
            raise CommandError(str(exc)) from exc
        for label, count in done.items():
            self.stdout.write(f"{label}: {count} row(s) re-encrypted")
        self.stdout.write(
            self.style.SUCCESS(f"{sum(done.values())} row(s) now encrypted with the primary key.")
        )
