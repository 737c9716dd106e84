"""``manage.py demo_manager``: the SDK's example keda manager, as ``make run`` runs it.

It gets what another team's manager would have: a user of its own with only the ModuleConfig and
SyncResource permissions, and a fresh API token (the previous demo token is revoked at each start).
Once the catalog has ``keda`` (the ``runtimes`` role creates it), this process becomes
``sdk/examples/keda_manager.py`` (exec), which knows nothing of Django: it talks to the web role's
API like any manager, watching ``keda``'s ModuleConfigs and answering with manifests. Its progress
(the last revision handled) is kept in ``$CONTROLPLANE_STATE_DIR/keda-manager.state``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.core.management.base import BaseCommand, CommandError

from fleet.models import Module
from kernel.api_tokens import api_token_create
from kernel.models import ApiToken

USER = "keda-manager"
PERMISSIONS = (
    "view_moduleconfig",
    "change_moduleconfig",
    "view_syncresource",
    "add_syncresource",
    "change_syncresource",
    "delete_syncresource",
)
EXAMPLE = settings.BASE_DIR / "sdk" / "examples" / "keda_manager.py"


def manager_token() -> str:
    """A new token of the manager's user (created with its permissions the first time)."""
    user, _ = User.objects.get_or_create(username=USER)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="controlplane", codename__in=PERMISSIONS)
    )
    ApiToken.objects.filter(user=user, name="demo").delete()
    return api_token_create(user=user, name="demo")[1]


class Command(BaseCommand):
    help = "Run the example keda manager (built on kyma_module_sdk) against this control plane."

    def handle(self, *args: Any, **options: Any) -> None:
        deadline = time.monotonic() + 300
        while not Module.objects.filter(name="keda").exists():
            if time.monotonic() > deadline:
                raise CommandError("the module catalog has no keda (is the runtimes role running?)")
            time.sleep(0.5)
        key = manager_token()
        sdk = str(settings.BASE_DIR / "sdk")
        env = dict(
            os.environ,
            KCP_API=f"{settings.PUBLIC_URL}/api/v1",
            KCP_TOKEN=key,
            STATE_FILE=str(settings.STATE_DIR / "keda-manager.state"),
            PYTHONPATH=os.pathsep.join(p for p in (sdk, os.environ.get("PYTHONPATH", "")) if p),
        )
        self.stdout.write(f"keda manager (sdk/examples/keda_manager.py) follows {env['KCP_API']} as {USER}")
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, str(EXAMPLE)], env)
