"""``manage.py serviceaccount create NAME``: a user for automation, bound by its name."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from access.services import service_account_create
from kernel import audit
from kernel.errors import ValidationFailed


class Command(BaseCommand):
    help = (
        "Create a service account (user sa-NAME, no password): bind it by that name in a "
        "FleetRoleBinding's spec.users and give it tokens (manage.py token create sa-NAME ...)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="create the service account sa-NAME")
        create.add_argument("name", help="what the automation is, e.g. ci (the user is sa-ci)")
        create.add_argument("--description", default="", help="who runs it and why")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["name"]
        try:
            with audit.acting(audit.command_actor(f"manage.py serviceaccount create {name}")):
                user = service_account_create(name=name, description=options["description"])
        except ValidationFailed as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(user.get_username())
