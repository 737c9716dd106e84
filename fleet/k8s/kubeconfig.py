"""Checks of kubeconfig documents (no network, no Kubernetes client)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from kernel.documents.yamlio import DocumentError, load_documents
from kernel.errors import ValidationFailed


def _named(config: dict[str, Any], section: str, errors: list[tuple[str, str]]) -> dict[str, dict]:
    entries = config.get(section)
    if not isinstance(entries, list) or not entries:
        errors.append((section, "must be a non-empty list"))
        return {}
    found = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            errors.append((f"{section}[{index}]", "needs a name"))
            continue
        found[entry["name"]] = entry
    return found


def parse_kubeconfig(text: str) -> dict[str, Any]:
    """Parse a kubeconfig and check that its current context leads to a server URL.

    Raises :class:`ValidationFailed` with the path of the first problems (the kubeconfig itself
    is never echoed back: it holds credentials).
    """
    try:
        docs = load_documents(text, source="kubeconfig")
    except DocumentError as exc:
        raise ValidationFailed(str(exc).replace("kubeconfig: ", "kubeconfig is not valid YAML: ", 1)) from exc
    if len(docs) != 1:
        raise ValidationFailed(f"a kubeconfig is one YAML document, got {len(docs)}")
    config = docs[0]
    errors: list[tuple[str, str]] = []
    clusters = _named(config, "clusters", errors)
    contexts = _named(config, "contexts", errors)
    users = _named(config, "users", errors)
    current = config.get("current-context")
    if errors:
        raise ValidationFailed("invalid kubeconfig", errors=[(f"kubeconfig.{p}", r) for p, r in errors])
    if not current and len(contexts) == 1:
        current = next(iter(contexts))
    if current not in contexts:
        raise ValidationFailed(
            "invalid kubeconfig", errors=[("kubeconfig.current-context", f"no context named {current!r}")]
        )
    context = contexts[current].get("context") or {}
    cluster = clusters.get(context.get("cluster"))
    if cluster is None:
        raise ValidationFailed(
            "invalid kubeconfig",
            errors=[("kubeconfig.contexts", f"context {current!r} names an unknown cluster")],
        )
    if context.get("user") and context["user"] not in users:
        raise ValidationFailed(
            "invalid kubeconfig",
            errors=[("kubeconfig.contexts", f"context {current!r} names an unknown user")],
        )
    server = (cluster.get("cluster") or {}).get("server", "")
    parsed = urlparse(server if isinstance(server, str) else "")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValidationFailed(
            "invalid kubeconfig",
            errors=[("kubeconfig.clusters", f"cluster {context.get('cluster')!r} has no http(s) server URL")],
        )
    return config


def validate_kubeconfig(text: str) -> None:
    parse_kubeconfig(text)
