"""Label and field selectors, in their query-string form and as ``LabelSelector`` objects.

Parsed selectors are cached: a fleet controller sends the same few selector strings over and
over, so parsing happens once and each request only pays for matching.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

# (key, operator, values): operators are "=", "!=", "in", "notin", "exists", "!", "gt", "lt".
Requirement = tuple[str, str, frozenset[str]]
FieldRequirement = tuple[str, bool, str]  # (dotted path, must equal?, value)

_SET_TERM = re.compile(r"^\s*([^\s!=<>(),]+)\s+(in|notin)\s*\(([^()]*)\)\s*$")
_CMP_TERM = re.compile(r"^\s*([^\s!=<>(),]+)\s*(==|=|!=|>|<)\s*([^\s!=<>(),]*)\s*$")
_KEY = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")


def _split_terms(text: str) -> list[str]:
    terms, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


@functools.lru_cache(maxsize=2048)
def parse_labels(text: str) -> tuple[Requirement, ...]:
    """Parse ``a=b,c!=d,e in (f,g),h notin (i),j,!k``; raises ValueError like the apiserver's 400."""
    requirements: list[Requirement] = []
    for term in _split_terms(text):
        if match := _SET_TERM.match(term):
            key, op, values = match.groups()
            requirements.append((key, op, frozenset(v.strip() for v in values.split(",") if v.strip())))
        elif match := _CMP_TERM.match(term):
            key, op, value = match.groups()
            op = {"==": "=", ">": "gt", "<": "lt"}.get(op, op)
            if op in ("gt", "lt") and not value.lstrip("-").isdigit():
                why = "for 'gt', 'lt' operators, exactly one integer value is required"
                raise ValueError(f"unable to parse requirement: {why}: {term}")
            requirements.append((key, op, frozenset((value,))))
        elif match := _KEY.match(term):
            negated, key = match.groups()
            requirements.append((key, "!" if negated else "exists", frozenset()))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return tuple(requirements)


def from_label_selector(selector: Mapping[str, Any] | None) -> tuple[Requirement, ...]:
    """Translate a ``metav1.LabelSelector`` (matchLabels + matchExpressions)."""
    if not selector:
        return ()
    requirements: list[Requirement] = [
        (key, "=", frozenset((str(value),))) for key, value in (selector.get("matchLabels") or {}).items()
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or ():
        op = ops.get(expr.get("operator", ""))
        if op is None:
            raise ValueError(f"{expr.get('operator')!r} is not a valid label selector operator")
        requirements.append((expr.get("key", ""), op, frozenset(expr.get("values") or ())))
    return tuple(requirements)


def labels_match(requirements: tuple[Requirement, ...], labels: Mapping[str, str] | None) -> bool:
    """Whether labels satisfy every requirement."""
    labels = labels or {}
    for key, op, values in requirements:
        present = key in labels
        value = labels.get(key)
        if op == "=":
            ok = present and value in values
        elif op == "!=":
            ok = not present or value not in values
        elif op == "in":
            ok = present and value in values
        elif op == "notin":
            ok = not present or value not in values
        elif op == "exists":
            ok = present
        elif op == "!":
            ok = not present
        else:
            ok = present and _compare(value, op, next(iter(values)))
        if not ok:
            return False
    return True


def _compare(value: str | None, op: str, bound: str) -> bool:
    try:
        number = int(value or "")
    except ValueError:
        return False
    return number > int(bound) if op == "gt" else number < int(bound)


@functools.lru_cache(maxsize=1024)
def parse_fields(text: str) -> tuple[FieldRequirement, ...]:
    """Parse ``metadata.name=x,status.phase!=Running`` into requirements."""
    requirements: list[FieldRequirement] = []
    for term in _split_terms(text):
        for op in ("!=", "==", "="):
            if op in term:
                path, value = term.split(op, 1)
                requirements.append((path.strip(), op != "!=", value.strip()))
                break
        else:
            raise ValueError(f"invalid selector: '{text}'; can't understand '{term}'")
    return tuple(requirements)


def fields_match(requirements: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    """Whether the object's fields satisfy every requirement (missing fields are '')."""
    for path, equal, expected in requirements:
        node: Any = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        actual = "" if node is None else str(node)
        if (actual == expected) != equal:
            return False
    return True
