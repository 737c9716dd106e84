"""``manage.py runtime_access [--base | --modules]``: the RBAC the control plane needs in a runtime.

Prints YAML to apply in each runtime (``kubectl apply -f -``) before its kubeconfig goes into a
Kyma: the base (what ``deploy/runtime-access/`` holds) and the rules of the catalog's modules whose
manifest policy reaches beyond what the base names (see ``reconciler.access``). Run it
again after such a module changes.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from fleet.models import Module
from kernel.documents.yamlio import dump_yaml
from reconciler.access import base_manifests, module_manifests


class Command(BaseCommand):
    help = "Print the RBAC (ServiceAccount, roles, bindings) the control plane needs in a runtime."

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group()
        which.add_argument("--base", action="store_true", help="only what every runtime needs")
        which.add_argument("--modules", action="store_true", help="only the modules' extra rules")

    def handle(self, *args: Any, **options: Any) -> None:
        docs = [] if options["modules"] else base_manifests()
        if not options["base"]:
            docs += module_manifests(Module.objects.all())
        self.stdout.write(dump_yaml(docs), ending="")
