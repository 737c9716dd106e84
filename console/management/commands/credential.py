"""``manage.py credential create|revoke|list``: module managers' credentials from a terminal."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from fleet.models import Module, ModuleCredential
from fleet.services.credentials import module_credential_create, module_credential_revoke
from kernel import audit
from kernel.errors import ValidationFailed
from kernel.management.arguments import expiry_days
from kernel.timefmt import rfc3339


def _module(name: str) -> Module:
    module = Module.objects.filter(name=name).first()
    if module is None:
        raise CommandError(f"no module {name!r}")
    return module


class Command(BaseCommand):
    help = "Create (key printed once), revoke or list the API credentials of a module's manager."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="create a credential and print its key")
        create.add_argument("module", help="the module the credential acts for (e.g. keda)")
        create.add_argument("name", help="what it is for, unique per module (e.g. keda-manager)")
        create.add_argument(
            "--expires-in-days",
            type=expiry_days,
            default=None,
            metavar="N",
            help="the credential stops working after N days (default: never)",
        )
        revoke = actions.add_parser("revoke", help="revoke a credential for good")
        revoke.add_argument("module", help="the module whose credential it is (e.g. keda)")
        revoke.add_argument("name", help="the credential's name (manage.py credential list shows them)")
        listing = actions.add_parser("list", help="list credentials (never their keys)")
        listing.add_argument("module", nargs="?", help="only this module's")

    def handle(self, *args: Any, **options: Any) -> None:
        words = [options["action"], options.get("module") or "", options.get("name") or ""]
        with audit.acting(audit.command_actor(" ".join(["manage.py credential", *filter(None, words)]))):
            getattr(self, f"_{options['action']}")(options)

    def _create(self, options: dict[str, Any]) -> None:
        module = _module(options["module"])
        days = options["expires_in_days"]
        expires_at = timezone.now() + dt.timedelta(days=days) if days else None
        try:
            credential, key = module_credential_create(
                module=module, name=options["name"], expires_at=expires_at
            )
        except ValidationFailed as exc:
            raise CommandError(exc.message) from exc
        until = f"expires {rfc3339(expires_at)}" if expires_at else "never expires"
        self.stderr.write(
            f"Credential {credential.name!r} of module {module.name} ({until}); "
            "the key is shown only this once:"
        )
        self.stdout.write(key)

    def _revoke(self, options: dict[str, Any]) -> None:
        module = _module(options["module"])
        credential = module.credentials.filter(name=options["name"]).first()
        if credential is None:
            raise CommandError(f"module {module.name} has no credential {options['name']!r}")
        if not module_credential_revoke(credential=credential):
            self.stdout.write(f"{module.name}/{credential.name} was already revoked")
            return
        self.stdout.write(f"{module.name}/{credential.name} revoked")

    def _list(self, options: dict[str, Any]) -> None:
        credentials = ModuleCredential.objects.select_related("module").order_by("module__name", "name")
        if options["module"]:
            credentials = credentials.filter(module=_module(options["module"]))
        self.stdout.write(f"{'MODULE':<20} {'NAME':<24} {'KEY':<16} {'STATE':<8} LAST USED")
        for c in credentials:
            used = rfc3339(c.last_used_at) if c.last_used_at else "never"
            self.stdout.write(
                f"{c.module.name:<20} {c.name:<24} {c.prefix + '…':<16} {c.key_state:<8} {used}"
            )
