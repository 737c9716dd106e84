"""``manage.py apply -f FILE``: create or update objects from YAML/JSON documents (kubectl habits)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel import audit
from kernel.documents.registry import DocumentsInvalid, appliable, apply_documents, in_words
from kernel.documents.yamlio import DocumentError, load_documents


def _sources(paths: list[str]) -> list[tuple[str, str]]:
    texts = []
    for name in paths:
        if name == "-":
            texts.append(("<stdin>", sys.stdin.read()))
            continue
        path = Path(name)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
            if not files:
                raise CommandError(f"{name}: no .yaml, .yml or .json files in this directory")
        elif path.is_file():
            files = [path]
        else:
            raise CommandError(f"{name}: no such file or directory")
        texts.extend((str(f), f.read_text(encoding="utf-8")) for f in files)
    return texts


class Command(BaseCommand):
    # The kinds are the registry's, read when the parser is built (--help, the command reference).
    @property
    def help(self) -> str:
        names = in_words((kind.verbose_name or kind.kind for kind in appliable()), last="and")
        return f"Apply {names} documents (all or none)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "-f",
            "--filename",
            action="append",
            required=True,
            help="YAML/JSON file, directory, or - for stdin",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="write documents whose metadata.resourceVersion is stale (someone changed the object "
            "since it was read) instead of refusing them",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        docs = []
        try:
            for source, text in _sources(options["filename"]):
                docs.extend(load_documents(text, source=source))
        except (DocumentError, UnicodeDecodeError) as exc:
            raise CommandError(str(exc)) from exc
        if not docs:
            raise CommandError("no documents to apply")
        actor = audit.command_actor(
            "manage.py apply " + " ".join(f"-f {name}" for name in options["filename"])
        )
        try:
            with audit.acting(actor):
                results = apply_documents(docs, force=options["force"])
        except DocumentsInvalid as exc:
            audit.record_refusal(exc, action="apply", actor=actor)
            count = len(exc.failures)
            head = f"{count} document{'s' if count > 1 else ''} failed; nothing was applied"
            raise CommandError("\n".join([head, *exc.lines()])) from exc
        for result in results:
            self.stdout.write(result.describe())
            for warning in result.warnings:
                self.stderr.write(f"Warning: {result.qualified_name}: {warning}")
