"""``manage.py ensureadmin``: make sure an administrator exists (used by ``make run``)."""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from kernel import audit
from kernel.adminpassword import admin_password_write, box


class Command(BaseCommand):
    help = (
        "Create a superuser if none exists: DJANGO_SUPERUSER_USERNAME (default admin) and "
        "DJANGO_SUPERUSER_PASSWORD (required with DJANGO_DEBUG=0, never printed; in debug mode "
        "default random, printed in a box and written to STATE_DIR/admin-password, mode 0600)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write(
                "An administrator exists (reset a password with: python manage.py changepassword NAME)."
            )
            return
        #: Administrator created by `make run` (`manage.py ensureadmin`).
        username = os.environ.get("DJANGO_SUPERUSER_USERNAME", "admin")
        #: Password of that administrator (in production from a Secret: the installation's Job reads
        #: `controlplane-admin`); in debug mode a generated one is printed in a box and kept in
        #: `$CONTROLPLANE_STATE_DIR/admin-password`, mode 0600.
        #: Default: random (printed in a box; debug mode only)
        given = os.environ.get("DJANGO_SUPERUSER_PASSWORD", "")
        if not given and not settings.DEBUG:
            raise CommandError(
                "no administrator yet and DJANGO_SUPERUSER_PASSWORD is not set: give the first "
                "administrator's password (from a Secret); a generated one would end in a log"
            )
        password = given or secrets.token_urlsafe(12)
        #: E-mail address of that administrator.
        email = os.environ.get("DJANGO_SUPERUSER_EMAIL", "")
        with audit.acting(audit.command_actor("manage.py ensureadmin")), transaction.atomic():
            user = users.objects.create_superuser(username=username, email=email, password=password)
            audit.record_change(user, before=None)  # the password only as set
        if given:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Created administrator {username!r} with the password from DJANGO_SUPERUSER_PASSWORD"
                )
            )
            return
        path = admin_password_write(password)
        lines = [f"Created administrator {username!r}", f"password: {password}", f"(also in {path})"]
        self.stdout.write(self.style.SUCCESS(box(lines)))
