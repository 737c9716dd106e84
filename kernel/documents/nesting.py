"""How deep and how large a parsed document may be: one rule for every door a document comes in.

``json`` and PyYAML parse recursively, so a body of 100,000 ``[`` raises ``RecursionError`` inside
the parser (a 500 if nobody catches it), and a few lines of YAML aliases ("billion laughs") load
as a small graph of shared lists that expands to billions of values once anything walks it
(validation, serialisation, the database). The API parsers, the listener, ``manage.py apply`` and
the admin's JSON fields all parse through here, so they refuse the same documents with the same
message, before anything else looks at them.
"""

from __future__ import annotations

import json
from typing import Any

# Kubernetes objects are a handful of levels deep; 100 leaves room for any real manifest.
MAX_DEPTH = 100
# Values a document may expand to, counting every use of a YAML alias. Bounded input (4 MiB)
# without aliases stays below this; aliases that multiply past it are an attack, not a manifest.
MAX_VALUES = 1_000_000


class DocumentTooComplex(ValueError):
    """Nested deeper than ``MAX_DEPTH`` levels, or expanding to more than ``MAX_VALUES`` values."""


def too_deep(source: str) -> DocumentTooComplex:
    return DocumentTooComplex(f"{source}: document nested deeper than {MAX_DEPTH} levels")


def check_nesting(value: Any, *, source: str = "document") -> None:
    """Raise ``DocumentTooComplex`` if ``value`` (parsed JSON/YAML) is too deep or too large.

    Iterative, so it works where recursion would not; it walks shared (aliased) objects once per
    use, which is how the document expands for its readers, and stops at the first excess, so a
    recursive alias (``&a [*a]``) or an exponential one costs at most ``MAX_VALUES`` steps.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise DocumentTooComplex(f"{source}: document expands to more than {MAX_VALUES:,} values")
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_DEPTH:
            raise too_deep(source)
        stack.extend((child, depth + 1) for child in children)


def json_loads(data: str | bytes, *, source: str = "document") -> Any:
    """``json.loads`` that refuses documents nested deeper than ``MAX_DEPTH`` levels.

    Raises ``DocumentTooComplex`` for those and ``json.JSONDecodeError``/``UnicodeDecodeError``
    for malformed input, as ``json.loads`` does.
    """
    try:
        value = json.loads(data)
    except RecursionError:
        raise too_deep(source) from None
    # A text with fewer opening brackets than MAX_DEPTH cannot nest deeper, nor hold more values
    # than characters: the walk is skipped for small bodies (the listener's WatchEvents).
    if isinstance(data, bytes):
        brackets = data.count(b"{") + data.count(b"[")
    else:
        brackets = data.count("{") + data.count("[")
    if brackets >= MAX_DEPTH or len(data) >= MAX_VALUES:
        check_nesting(value, source=source)
    return value
