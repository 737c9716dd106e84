"""``manage.py ensureadmin``: make sure an administrator exists (used by ``make run``)."""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Create a superuser if none exists: DJANGO_SUPERUSER_USERNAME (default admin) and "
        "DJANGO_SUPERUSER_PASSWORD (default: random, printed once)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write(
                "An administrator exists (reset a password with: python manage.py changepassword NAME)."
            )
            return
        username = os.environ.get("DJANGO_SUPERUSER_USERNAME", "admin")
        password = os.environ.get("DJANGO_SUPERUSER_PASSWORD") or secrets.token_urlsafe(12)
        users.objects.create_superuser(
            username=username, email=os.environ.get("DJANGO_SUPERUSER_EMAIL", ""), password=password
        )
        shown = "from DJANGO_SUPERUSER_PASSWORD" if os.environ.get("DJANGO_SUPERUSER_PASSWORD") else password
        self.stdout.write(self.style.SUCCESS(f"Created administrator {username!r} with password: {shown}"))
        self.stdout.write("This password is shown only once.")
