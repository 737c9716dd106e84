"""``manage.py describe KIND NAMESPACE/NAME``: one object for a person, like ``kubectl describe``.

Metadata, spec, status, conditions and, for a Kyma, its recent WatchEvents and reconciles.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from kernel.documents.registry import in_words, listable
from kernel.documents.yamlio import dump_yaml
from kernel.management.targets import kind_named, object_named
from kernel.timefmt import rfc3339

RECENT = 10


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  " + "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _block(title: str, value: Any) -> list[str]:
    if not value:
        return [f"{title}: <none>"]
    text = dump_yaml([value]).strip().removeprefix("---").strip()
    return [f"{title}:", *(f"  {line}" for line in text.splitlines())]


def describe_lines(document: dict[str, Any], obj: Any) -> list[str]:
    """The describe text of one object, from its document and its related records."""
    meta = document.get("metadata", {})
    lines = [f"Name:         {meta.get('name')}"]
    if "namespace" in meta:
        lines.append(f"Namespace:    {meta['namespace']}")
    lines += [
        f"Kind:         {document.get('kind')} ({document.get('apiVersion')})",
        f"UID:          {meta.get('uid', '')}",
        f"Created:      {meta.get('creationTimestamp', '')}",
    ]
    if meta.get("deletionTimestamp"):
        lines.append(f"Deleting:     since {meta['deletionTimestamp']}")
    if meta.get("finalizers"):
        lines.append(f"Finalizers:   {', '.join(meta['finalizers'])}")
    for key in ("labels", "annotations"):
        if meta.get(key):
            lines.append(f"{key.capitalize() + ':':<14}{', '.join(f'{k}={v}' for k, v in meta[key].items())}")
    lines += _block("Spec", document.get("spec"))
    status = dict(document.get("status") or {})
    conditions = status.pop("conditions", None) or []
    lines.append(f"State:        {status.pop('state', '') or '<none>'}")
    lines += _block("Status", status)
    if conditions:
        lines.append("Conditions:")
        lines += _table(
            ["TYPE", "STATUS", "REASON", "MESSAGE", "LAST TRANSITION"],
            [
                [
                    str(c.get("type", "")),
                    str(c.get("status", "")),
                    str(c.get("reason", "")),
                    str(c.get("message", "")),
                    str(c.get("lastTransitionTime", "")),
                ]
                for c in conditions
            ],
        )
    else:
        lines.append("Conditions:   <none>")
    events = getattr(obj, "watch_events", None)
    if events is not None:
        recent = list(events.order_by("-received_at")[:RECENT])
        lines.append("Events:" if recent else "Events:       <none>")
        if recent:
            lines += _table(
                ["RECEIVED", "COMPONENT", "OBJECT", "OUTCOME", "COUNT"],
                [
                    [
                        rfc3339(e.received_at),
                        e.component,
                        f"{e.watched_namespace}/{e.watched_name}",
                        e.outcome,
                        str(e.count),
                    ]
                    for e in recent
                ],
            )
    reconciles = getattr(obj, "reconciles", None)
    if reconciles is not None:
        recent = list(reconciles.order_by("-started_at")[:RECENT])
        lines.append("Reconciles:" if recent else "Reconciles:   <none>")
        if recent:
            lines += _table(
                ["STARTED", "STATE", "DURATION", "WRITES", "MESSAGE"],
                [
                    [rfc3339(r.started_at), r.state, f"{r.duration_ms} ms", str(r.runtime_writes), r.message]
                    for r in recent
                ],
            )
    return lines


class Command(BaseCommand):
    # The kinds are the registry's, read when the parser is built (--help, the command reference).
    @property
    def help(self) -> str:
        return (
            f"Show one {in_words(kind.kind.lower() for kind in listable())} in detail: status, "
            "conditions, recent events and reconciles (like kubectl describe)."
        )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", help=in_words(kind.plural for kind in listable()))
        parser.add_argument("target", help="NAMESPACE/NAME (or NAME for kinds without a namespace)")

    def handle(self, *args: Any, **options: Any) -> None:
        kind = kind_named(options["kind"])
        obj = object_named(kind, options["target"])
        self.stdout.write("\n".join(describe_lines(kind.to_document(obj), obj)))
