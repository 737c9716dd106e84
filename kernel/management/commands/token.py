"""``manage.py token create USER NAME [--expires-in-days N]``: a named API token, key printed once."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from kernel import audit
from kernel.api_tokens import api_token_create
from kernel.errors import ValidationFailed
from kernel.management.arguments import expiry_days
from kernel.timefmt import rfc3339


class Command(BaseCommand):
    help = "Create a named API token; its key is printed once and never stored in clear."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="create a token and print its key")
        create.add_argument("user", help="the username the token acts as")
        create.add_argument("name", help="what the token is for, unique per user (e.g. ci-deploy)")
        create.add_argument(
            "--expires-in-days",
            type=expiry_days,
            default=None,
            metavar="N",
            help="the token stops working after N days (default: never)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        username = options["user"]
        user = user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        days = options["expires_in_days"]
        expires_at = timezone.now() + dt.timedelta(days=days) if days else None
        try:
            with audit.acting(audit.command_actor(f"manage.py token create {username} {options['name']}")):
                token, key = api_token_create(user=user, name=options["name"], expires_at=expires_at)
        except ValidationFailed as exc:
            raise CommandError(exc.message) from exc
        until = f"expires {rfc3339(expires_at)}" if expires_at else "never expires"
        self.stderr.write(f"Token {token.name!r} for {username} ({until}); the key is shown only this once:")
        self.stdout.write(key)
