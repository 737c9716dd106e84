"""Kubernetes label selectors (``matchLabels`` and ``matchExpressions``) applied to labels.

The shape is checked by ``schema.LABEL_SELECTOR`` wherever a document carries a selector; this
only evaluates a valid one, with Kubernetes' rules: every term must hold, ``In``/``NotIn`` compare
the label's value (``NotIn`` and ``DoesNotExist`` hold for a missing label), an empty selector
selects everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def describe(selector: Mapping[str, Any] | None) -> str:
    """``plan=trial,region in (eu-1,eu-2)``: a selector as kubectl's ``-l`` writes it."""
    if not selector:
        return ""
    parts = [f"{key}={value}" for key, value in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or ():
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            parts.append(f"{key} {'in' if operator == 'In' else 'notin'} ({','.join(values)})")
    return ",".join(parts)
