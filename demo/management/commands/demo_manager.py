"""``manage.py demo_manager``: the SDK's example keda manager, as ``make run`` runs it.

It gets what another team's manager would have: a credential of the ``keda`` module (read keda's
ModuleConfigs, report their status, write keda's SyncResources, nothing else), a fresh one at each
start (the previous demo credentials are revoked).
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
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from fleet.models import Module, ModuleCredential
from fleet.services.credentials import module_credential_create, module_credential_revoke

NAME = "demo-manager"
EXAMPLE = settings.BASE_DIR / "sdk" / "examples" / "keda_manager.py"


def manager_key(module: Module) -> str:
    """A new credential of ``module`` for the demo manager; earlier demo credentials are revoked."""
    for old in ModuleCredential.objects.filter(module=module, name__startswith=NAME, revoked_at__isnull=True):
        module_credential_revoke(credential=old)
    name = f"{NAME}-{timezone.now():%Y%m%d%H%M%S%f}"
    return module_credential_create(module=module, name=name)[1]


class Command(BaseCommand):
    help = "Run the example keda manager (built on kyma_module_sdk) against this control plane."

    def handle(self, *args: Any, **options: Any) -> None:
        deadline = time.monotonic() + 300
        while (module := Module.objects.filter(name="keda").first()) is None:
            if time.monotonic() > deadline:
                raise CommandError("the module catalog has no keda (is the runtimes role running?)")
            time.sleep(0.5)
        key = manager_key(module)
        sdk = str(settings.BASE_DIR / "sdk")
        env = dict(
            os.environ,
            KCP_API=f"{settings.PUBLIC_URL}/api/v1",
            KCP_TOKEN=key,
            STATE_FILE=str(settings.STATE_DIR / "keda-manager.state"),
            PYTHONPATH=os.pathsep.join(p for p in (sdk, os.environ.get("PYTHONPATH", "")) if p),
        )
        self.stdout.write(
            f"keda manager (sdk/examples/keda_manager.py) follows {env['KCP_API']} (keda credential)"
        )
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, str(EXAMPLE)], env)
