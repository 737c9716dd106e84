"""Reading and writing YAML/JSON documents the way kubectl users expect.

Loading is safe (no Python tags), bounded in size, depth and alias expansion (``nesting``),
tolerant of empty documents and ``List`` wrappers, and reports syntax errors with the line and
column so a user can find them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import yaml

from .nesting import (
    DocumentInvalid,
    bounded_int,
    check_integer_literal,
    check_nesting,
    finite_float,
    too_deep,
)

MAX_INPUT_BYTES = 4 * 1024 * 1024


class DocumentError(ValueError):
    """Input that is not a well-formed YAML/JSON stream of objects."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings (Kubernetes treats them as strings)."""


class _StoredLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same, parsing with libyaml (C) when PyYAML has it, as its wheels do. Nesting far past
    ``MAX_DEPTH`` overflows libyaml's C stack and kills the process instead of raising
    RecursionError: only for text this control plane stored after loading it with
    :class:`_Loader` (see ``load_documents(stored=True)``)."""


def _bounded_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    """YAML's integers (signs, ``_``, ``0x``, ``0o``, sexagesimal), refusing absurdly long ones
    before converting them (``nesting.MAX_INTEGER_DIGITS``)."""
    try:
        check_integer_literal(str(node.value))
    except DocumentInvalid as exc:
        raise yaml.constructor.ConstructorError(None, None, str(exc), node.start_mark) from None
    return loader.construct_yaml_int(node)


def _finite_float(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    """YAML's floats, refusing ``.inf``, ``.nan`` and overflowing ones: JSON (and so Kubernetes,
    which converts YAML to JSON) has no such numbers."""
    value = loader.construct_yaml_float(node)
    if value != value or value in (float("inf"), float("-inf")):
        raise yaml.constructor.ConstructorError(
            None, None, f"the number {node.value!r} is not finite (JSON has no such number)", node.start_mark
        )
    return value


for _loader in (_Loader, _StoredLoader):
    _loader.yaml_implicit_resolvers = {
        key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    _loader.add_constructor("tag:yaml.org,2002:int", _bounded_int)
    _loader.add_constructor("tag:yaml.org,2002:float", _finite_float)


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the order given, multi-line strings as literal blocks."""


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    data = str(data)  # str enums (model choices) render as their value
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_multi_representer(str, _str_presenter)


def load_documents(text: str | bytes, *, source: str = "input", stored: bool = False) -> list[dict[str, Any]]:
    """Parse one or many YAML (or JSON) documents into a list of mappings.

    ``kind: List`` documents are flattened into their ``items``; empty documents are skipped.
    ``stored``: the text was loaded by this function when it was stored (a Kyma's kubeconfig, a
    SyncResource's manifests), so its nesting is known to be bounded: libyaml parses it. Every
    new runtime client parses a kubeconfig, and every reconcile of synced manifests parses them.
    """
    if isinstance(text, bytes):
        if len(text) > MAX_INPUT_BYTES:
            raise DocumentError(f"{source}: larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DocumentError(f"{source}: not UTF-8 text ({exc})") from exc
    if len(text) > MAX_INPUT_BYTES:
        raise DocumentError(f"{source}: larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB")
    try:
        raw = _json_documents(text)
    except DocumentInvalid as exc:
        raise DocumentError(f"{source}: {exc}") from None
    shared = raw is None  # YAML: aliases share objects
    if raw is None:
        raw = _yaml_documents(text, source=source, stored=stored)
    try:
        for doc in raw:
            check_nesting(doc, source=source, shared=shared)
    except DocumentInvalid as exc:
        raise DocumentError(str(exc)) from None
    documents: list[dict[str, Any]] = []
    for index, doc in enumerate(raw):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise DocumentError(f"{source}: document {index + 1} is a {type(doc).__name__}, not an object")
        if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            for position, item in enumerate(doc["items"]):
                if not isinstance(item, dict):
                    raise DocumentError(f"{source}: document {index + 1}, items[{position}] is not an object")
                documents.append(item)
        else:
            documents.append(doc)
    return documents


_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # YAML then reads it (a plain string)


def _json_documents(text: str) -> list[Any] | None:
    """The documents when every one of them is a JSON object (``---`` lines between them), as
    module managers and kubectl's JSON output write them; ``None`` for anything else, which the
    YAML loader then reads. JSON is YAML's subset for such objects, except that JSON numbers like
    ``1e5`` are numbers (YAML 1.1 reads them as strings; Kubernetes as numbers)."""
    chunks = [chunk.strip() for chunk in _SEPARATOR.split(text)]
    if not any(chunks) or not all(chunk.startswith("{") for chunk in chunks if chunk):
        return None
    try:
        return [
            json.loads(chunk, parse_int=bounded_int, parse_float=finite_float, parse_constant=_not_json)
            for chunk in chunks
            if chunk
        ]
    except DocumentInvalid:
        raise  # JSON, but a number no document may hold
    except (ValueError, RecursionError):
        return None  # not JSON after all (or too deep for it): the YAML loader says what is wrong


def _yaml_documents(text: str, *, source: str, stored: bool) -> list[Any]:
    try:
        return list(yaml.load_all(text, Loader=_StoredLoader if stored else _Loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise DocumentError(f"{source}: invalid YAML at {where}: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise DocumentError(f"{source}: invalid YAML: {exc}") from exc
    except RecursionError:
        raise DocumentError(str(too_deep(source))) from None


def dump_yaml(documents: Iterable[dict[str, Any]]) -> str:
    """Serialize documents as a multi-document YAML stream."""
    return yaml.dump_all(list(documents), Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def dump_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False) + "\n"
