"""What a parsed document may be: one rule for every door a document comes in.

``json`` and PyYAML parse recursively, so a body of 100,000 ``[`` raises ``RecursionError`` inside
the parser (a 500 if nobody catches it), and a few lines of YAML aliases ("billion laughs") load
as a small graph of shared lists that expands to billions of values once anything walks it
(validation, serialisation, the database). The API parsers, the listener, ``manage.py apply`` and
the admin's JSON fields all parse through here, so they refuse the same documents with the same
message, before anything else looks at them:

* nested deeper than ``MAX_DEPTH`` levels, or expanding to more than ``MAX_VALUES`` values;
* YAML aliases that multiply the document more than ``ALIAS_FACTOR``-fold (see below);
* an integer of more than ``MAX_INTEGER_DIGITS`` digits, or a number that is not finite;
* text no database stores: a NUL character, or a lone UTF-16 surrogate (``"\\ud800"`` in JSON),
  which is not Unicode at all (PostgreSQL refuses both; an answer quoting one cannot be encoded).

Aliases: Kubernetes refuses documents made mostly of alias expansions (go-yaml's answer to
CVE-2019-11253), so a document it would refuse is refused here too. A stored expansion is not
cheap either: every later read (API, watch, reconcile, admin) pays the multiplied size. Real
anchors (shared labels, a repeated container) expand a document a few times at most, so the
rule leaves documents under ``ALIAS_FLOOR`` values alone and allows ``ALIAS_FACTOR``-fold above.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Kubernetes objects are a handful of levels deep; 100 leaves room for any real manifest.
MAX_DEPTH = 100
# Values a document may expand to, counting every use of a YAML alias. Bounded input (4 MiB)
# without aliases stays below this; aliases that multiply past it are an attack, not a manifest.
MAX_VALUES = 1_000_000
# An API server decodes a JSON number as int64 or float64: no integer with more digits than
# float64's largest value (about 1.8e308) is anything Kubernetes accepts. Python refuses to
# convert more than 4,300 digits anyway (with a ValueError nothing expected: a 500).
MAX_INTEGER_DIGITS = 308
# Alias expansion: a document expanding to more than ALIAS_FLOOR values may hold at most
# ALIAS_FACTOR times the values it spells out.
ALIAS_FLOOR = 10_000
ALIAS_FACTOR = 10


class DocumentInvalid(ValueError):
    """A document that parses but that no door accepts; the message says where and why."""


class DocumentTooComplex(DocumentInvalid):
    """Nested deeper than ``MAX_DEPTH`` levels, or expanding to more than ``MAX_VALUES`` values
    (or ``ALIAS_FACTOR`` times what it spells out)."""


def too_deep(source: str) -> DocumentTooComplex:
    return DocumentTooComplex(f"{source}: document nested deeper than {MAX_DEPTH} levels")


def check_integer_literal(text: str) -> None:
    """Refuse an integer literal (JSON, or YAML with its ``_``, ``0x``, ``:``) too long to be a
    number, before anything converts it."""
    if len(text) > MAX_INTEGER_DIGITS:
        digits = sum(1 for char in text if char.isalnum())
        if digits > MAX_INTEGER_DIGITS:
            raise DocumentInvalid(
                f"an integer of {digits} digits is too large (at most {MAX_INTEGER_DIGITS})"
            )


def bounded_int(text: str) -> int:
    """``int(text)`` for a JSON integer literal, refusing one too long to be a number."""
    check_integer_literal(text)
    return int(text)


def finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise DocumentInvalid(f"the number {_shown(text, 40)} is too large (not finite)")
    return value


def refuse_constant(name: str) -> Any:
    raise DocumentInvalid(f"{name} is not a JSON number")


def _shown(text: str, limit: int) -> str:
    """``text`` as it may appear in a message: ASCII (escapes for the rest), at most ``limit``."""
    shown = text.encode("ascii", "backslashreplace").decode("ascii")
    return shown if len(shown) <= limit else shown[:limit] + "…"


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored (``None`` when it can)."""
    if text.isascii():
        return "contains a NUL character (\\u0000), which cannot be stored" if "\x00" in text else None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.start + 1].encode("utf-8", "backslashreplace").decode("ascii")
        return f"contains a lone surrogate ({bad}), which is not Unicode text"
    return "contains a NUL character (\\u0000), which cannot be stored" if "\x00" in text else None


def storable(text: str) -> str:
    """``text`` with what no database stores (NUL, lone surrogates) replaced by U+FFFD, as Go's
    ``encoding/json`` decodes an invalid surrogate: for records of what a client sent."""
    if text_problem(text) is None:
        return text
    return "".join("\ufffd" if char == "\x00" or "\ud800" <= char <= "\udfff" else char for char in text)


def _path(link: Any) -> str:
    parts: list[Any] = []
    while link is not None:
        link, part = link
        parts.append(part)
    path = ""
    for part in reversed(parts):
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(document)"


def check_nesting(value: Any, *, source: str = "document", shared: bool = False) -> None:
    """Raise ``DocumentInvalid`` (``DocumentTooComplex`` for size) unless ``value`` (parsed JSON
    or YAML) keeps the rules above.

    Iterative, so it works where recursion would not; it walks shared (aliased) objects once per
    use, which is how the document expands for its readers, and stops at the first excess, so a
    recursive alias (``&a [*a]``) or an exponential one costs at most ``MAX_VALUES`` steps.
    ``shared``: the value may share objects (YAML aliases); the expansion is then measured against
    what the document spells out.
    """
    stack: list[tuple[Any, int, Any]] = [(value, 1, None)]
    seen = 0
    spelled = 1
    distinct: set[int] = set()
    while stack:
        item, depth, link = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise DocumentTooComplex(f"{source}: document expands to more than {MAX_VALUES:,} values")
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                raise DocumentInvalid(f"{source}: {_path(link)}: {problem}")
            continue
        if isinstance(item, float) and not math.isfinite(item):
            raise DocumentInvalid(f"{source}: {_path(link)}: the number is too large (not finite)")
        if isinstance(item, dict):
            if depth > MAX_DEPTH:
                raise too_deep(source)
            for key in item:
                if isinstance(key, str) and (problem := text_problem(key)):
                    raise DocumentInvalid(f"{source}: {_path(link)}: a key {problem}")
            children: Any = [(child, depth + 1, (link, _shown(str(key), 80))) for key, child in item.items()]
        elif isinstance(item, list):
            if depth > MAX_DEPTH:
                raise too_deep(source)
            children = [(child, depth + 1, (link, index)) for index, child in enumerate(item)]
        else:
            continue
        if shared and id(item) not in distinct:
            distinct.add(id(item))
            spelled += len(children)
        stack.extend(children)
    if shared and seen > ALIAS_FLOOR and seen > ALIAS_FACTOR * spelled:
        raise DocumentTooComplex(
            f"{source}: YAML aliases expand the document {seen // spelled}-fold ({spelled:,} values "
            f"written, {seen:,} once expanded); at most {ALIAS_FACTOR}-fold is accepted"
        )


_DECODER = json.JSONDecoder(parse_int=bounded_int, parse_float=finite_float, parse_constant=refuse_constant)


def json_loads(data: str | bytes, *, source: str = "document") -> Any:
    """``json.loads`` with the rules above: ``DocumentInvalid`` (or ``DocumentTooComplex``) for a
    document that breaks them, ``json.JSONDecodeError``/``UnicodeDecodeError`` for malformed input,
    as ``json.loads`` raises them. ``NaN`` and ``Infinity`` are not JSON and are refused.
    """
    try:
        # json.loads, less the decoder it builds on every call with these hooks (a third of the
        # cost for a WatchEvent's few hundred bytes): the same checks, the same errors.
        if isinstance(data, str):
            if data.startswith("\ufeff"):
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", data, 0)
            text = data
        else:
            text = data.decode(json.detect_encoding(data), "surrogatepass")
        value = _DECODER.decode(text)
    except RecursionError:
        raise too_deep(source) from None
    except DocumentInvalid as exc:
        raise type(exc)(f"{source}: {exc}") from None
    # A text with fewer opening brackets than MAX_DEPTH cannot nest deeper, nor hold more values
    # than characters, and without a \u escape it holds no NUL or surrogate: the walk is skipped
    # for such bodies (the listener's WatchEvents).
    if isinstance(data, bytes):
        brackets = data.count(b"{") + data.count(b"[")
        escaped = b"\\u" in data
    else:
        brackets = data.count("{") + data.count("[")
        escaped = "\\u" in data
    if brackets >= MAX_DEPTH or len(data) >= MAX_VALUES or escaped:
        check_nesting(value, source=source)
    return value
