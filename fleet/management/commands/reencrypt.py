"""``manage.py reencrypt``: re-encrypt every stored secret under the current primary key."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from kernel.sealing import SealedField, SealedSecretError


class Command(BaseCommand):
    help = (
        "After putting a new key first in CONTROLPLANE_ENCRYPTION_KEYS, re-encrypt all private keys and "
        "kubeconfigs with it; then the old key can be removed."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        total = 0
        for model in apps.get_models():
            fields = [f.name for f in model._meta.fields if isinstance(f, SealedField)]
            if not fields:
                continue
            done = 0
            with transaction.atomic():
                for obj in model.objects.only("pk", *fields).iterator(chunk_size=500):
                    try:
                        for name in fields:
                            setattr(obj, name, getattr(obj, name).rotated())
                    except SealedSecretError as exc:
                        raise CommandError(f"{model._meta.label} {obj.pk}: {exc}") from exc
                    obj.save(update_fields=fields)
                    done += 1
            total += done
            self.stdout.write(f"{model._meta.label}: {done} row(s) re-encrypted")
        self.stdout.write(self.style.SUCCESS(f"{total} row(s) now encrypted with the primary key."))
