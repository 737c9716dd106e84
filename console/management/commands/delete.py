"""``manage.py delete KIND NAMESPACE/NAME [--wait]``: delete like the API's ``DELETE`` does.

The same services as the API: an object with something to clean up (a Kyma's runtime, a
Watcher's resources in every runtime) enters Deleting and its reconcile removes it; ``--wait``
polls until the object is gone (exit 0) or the timeout passes (exit 1, naming its state).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Kyma, Module, SyncResource
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from kernel import audit
from kernel.documents.registry import ResourceKind, in_words, listable
from kernel.management.arguments import seconds
from kernel.management.targets import kind_named, object_named
from watchers.models import Watcher
from watchers.services import watcher_delete


def _module_delete(module: Module) -> bool:
    module_services.module_delete(module=module)
    return True


# Each returns True when the object is gone at once (as the API's ``delete_object``).
DELETERS: dict[type, Callable[[Any], bool]] = {
    Kyma: lambda kyma: kyma_services.kyma_delete(kyma=kyma),
    Watcher: lambda watcher: watcher_delete(watcher=watcher),
    Module: _module_delete,
    SyncResource: lambda resource: module_services.syncresource_delete(resource=resource),
}


def _deletable() -> list[ResourceKind]:
    return [kind for kind in listable() if kind.model in DELETERS]


class Command(BaseCommand):
    # The kinds are the registry's that have a deleter, read when the parser is built.
    @property
    def help(self) -> str:
        kinds = in_words(kind.kind.lower() for kind in _deletable())
        return f"Delete a {kinds} (as the API's DELETE); --wait until it is gone."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", help=in_words(kind.plural for kind in _deletable()))
        parser.add_argument("target", help="NAMESPACE/NAME (or NAME for kinds without a namespace)")
        parser.add_argument("--wait", action="store_true", help="wait until the cleanup is done")
        parser.add_argument(
            "--timeout", type=seconds, default=300, help="seconds --wait waits at most (default 300)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        kind = kind_named(options["kind"])
        deleter = DELETERS.get(kind.model)
        if deleter is None:
            raise CommandError(f"{kind.plural} cannot be deleted on their own")
        obj = object_named(kind, options["target"])
        label = f"{kind.kind.lower()}/{obj.name}"
        with audit.acting(audit.command_actor(f"manage.py delete {options['kind']} {options['target']}")):
            gone = deleter(obj)
        if gone:
            self.stdout.write(f"{label} deleted")
            return
        self.stdout.write(f"{label} deleting (its reconcile cleans up first)")
        if not options["wait"]:
            return
        rows = kind.model.objects.filter(pk=obj.pk)
        deadline = time.monotonic() + options["timeout"]
        while rows.exists():
            if time.monotonic() >= deadline:
                state = getattr(rows.first(), "state", "") or "still present"
                raise CommandError(f"{label} not gone after {options['timeout']:g} s (state: {state})")
            time.sleep(0.5)
        self.stdout.write(f"{label} deleted")
