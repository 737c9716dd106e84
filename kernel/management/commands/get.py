"""``manage.py get KIND [NAMESPACE/NAME] [-o yaml|json]``: show objects like kubectl does."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel.documents.registry import ResourceKind, for_name, in_words, listable
from kernel.documents.yamlio import dump_json, dump_yaml
from kernel.errors import ApplicationError


def _select(kind: ResourceKind, target: str | None, namespace: str | None) -> list[Any]:
    name = None
    if target:
        if "/" in target:
            if not kind.namespaced:
                raise CommandError(f"{kind.plural} are not namespaced: give just the name")
            namespace, name = target.split("/", 1)
        else:
            name = target
    objects = list(kind.select(namespace, name).order_by(*(["namespace"] if kind.namespaced else []), "name"))
    if name and not objects:
        where = f"{namespace}/{name}" if namespace else name
        raise CommandError(f'{kind.plural} "{where}" not found')
    return objects


def _table(kind: ResourceKind, objects: list[Any]) -> str:
    columns = kind.columns()
    rows = [[header for header, _ in columns]] + [[str(get(obj)) for _, get in columns] for obj in objects]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


class Command(BaseCommand):
    # The kinds are the registry's, read when the parser is built (--help, the command reference).
    @property
    def help(self) -> str:
        return f"List or show {in_words(kind.plural for kind in listable())}."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", help=in_words(kind.plural for kind in listable()))
        parser.add_argument("target", nargs="?", help="NAMESPACE/NAME or NAME")
        parser.add_argument("-n", "--namespace", help="only this namespace")
        parser.add_argument(
            "-o", "--output", choices=["table", "yaml", "json"], default="table", help="output format"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            kind = for_name(options["kind"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        objects = _select(kind, options["target"], options["namespace"])
        if options["output"] == "table":
            if not objects:
                self.stderr.write(f"No {kind.plural} found.")
                return
            self.stdout.write(_table(kind, objects))
            return
        docs = [kind.to_document(obj) for obj in objects]
        single = options["target"] is not None and len(docs) == 1
        payload = docs[0] if single else {"apiVersion": "v1", "kind": "List", "items": docs}
        self.stdout.write(
            dump_yaml([payload]) if options["output"] == "yaml" else dump_json(payload), ending=""
        )
