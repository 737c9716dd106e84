"""``manage.py runtime_edit KYMA [--channel C] [--enable M] [--disable M]``: change a runtime's Kyma
inside the runtime, as its user would with kubectl; the runtime watcher reports the change."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Kyma
from fleet.reconciler.runtime_edits import runtime_kyma_edit
from kernel.errors import ApplicationError


class Command(BaseCommand):
    help = (
        "Edit the Kyma kyma-system/default inside a runtime (channel, modules) the way the runtime's "
        "user would; the runtime watcher reports it and the control plane's copy follows."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kyma", help="NAMESPACE/NAME or NAME (namespace kcp-system) of the Kyma")
        parser.add_argument("--channel", help="switch the runtime to this channel")
        parser.add_argument("--enable", action="append", default=[], metavar="MODULE", help="add a module")
        parser.add_argument(
            "--disable", action="append", default=[], metavar="MODULE", help="remove a module"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        namespace, _, name = options["kyma"].rpartition("/")
        namespace = namespace or "kcp-system"
        kyma = Kyma.objects.filter(namespace=namespace, name=name).first()
        if kyma is None:
            raise CommandError(f'kymas "{namespace}/{name}" not found')
        if options["channel"] is None and not options["enable"] and not options["disable"]:
            raise CommandError("nothing to change: give --channel, --enable or --disable")
        try:
            changes = runtime_kyma_edit(
                kyma=kyma, channel=options["channel"], enable=options["enable"], disable=options["disable"]
            )
        except ApplicationError as exc:
            details = "".join(f"\n  {field or 'spec'}: {reason}" for field, reason in exc.errors)
            raise CommandError(exc.message + details) from exc
        if not changes:
            self.stdout.write(f"The runtime's Kyma of {kyma.key} already says so: nothing changed.")
            return
        summary = ", ".join(
            f"channel={changes['channel']}"
            if key == "channel"
            else "modules=" + ",".join(m.get("name", "?") for m in changes["modules"])
            for key in changes
        )
        self.stdout.write(self.style.SUCCESS(f"Changed the runtime's Kyma of {kyma.key}: {summary}"))
