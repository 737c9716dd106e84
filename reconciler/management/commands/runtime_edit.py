"""``manage.py runtime_edit KYMA [--channel C] [--enable M] [--disable M] [--module-spec M F=V ...]``:
change a runtime's Kyma, or a module's CR, inside the runtime, as its user would with kubectl; the
runtime watcher reports the change."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Kyma
from kernel.errors import ApplicationError
from reconciler.runtime_edits import runtime_kyma_edit, runtime_module_edit


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
        parser.add_argument(
            "--module-spec",
            nargs="+",
            metavar=("MODULE", "FIELD=VALUE"),
            help="merge FIELD=VALUE pairs into the spec of MODULE's CR in the runtime (VALUE is JSON "
            "when it parses, e.g. replicas=3, else a string): --module-spec keda replicas=3",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        namespace, _, name = options["kyma"].rpartition("/")
        namespace = namespace or "kcp-system"
        kyma = Kyma.objects.filter(namespace=namespace, name=name).first()
        if kyma is None:
            raise CommandError(f'kymas "{namespace}/{name}" not found')
        if options["module_spec"]:
            self.module_spec(kyma, options["module_spec"])
            if options["channel"] is None and not options["enable"] and not options["disable"]:
                return
        if options["channel"] is None and not options["enable"] and not options["disable"]:
            raise CommandError("nothing to change: give --channel, --enable, --disable or --module-spec")
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

    def module_spec(self, kyma: Kyma, words: list[str]) -> None:
        module, pairs = words[0], words[1:]
        spec: dict[str, Any] = {}
        for pair in pairs:
            field, sep, text = pair.partition("=")
            if not sep or not field:
                raise CommandError(f"--module-spec: expected FIELD=VALUE, got {pair!r}")
            try:
                spec[field] = json.loads(text)
            except ValueError:
                spec[field] = text
        try:
            changes = runtime_module_edit(kyma=kyma, module=module, spec=spec)
        except ApplicationError as exc:
            details = "".join(f"\n  {field or 'spec'}: {reason}" for field, reason in exc.errors)
            raise CommandError(exc.message + details) from exc
        if not changes:
            self.stdout.write(
                f"The {module} CR in the runtime of {kyma.key} already says so: nothing changed."
            )
            return
        summary = ", ".join(f"{key}={json.dumps(value)}" for key, value in changes.items())
        self.stdout.write(
            self.style.SUCCESS(f"Changed the {module} CR in the runtime of {kyma.key}: {summary}")
        )
