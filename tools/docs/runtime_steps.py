"""What the control plane puts in every runtime, as a table, from the registry of runtime steps
(``reconciler.steps``): a row per kind, in the order a reconcile goes through them."""

from __future__ import annotations


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{name}`" for name in names) or "any"


def markdown() -> str:
    from reconciler.registry import Read
    from reconciler.steps import REGISTRY

    rows = [
        "| step | kind | names | what it is | read | drift repaired | deleted |",
        "|---|---|---|---|---|---|---|",
    ]
    for step, kind in REGISTRY.kinds():
        shown = "module CR (its kind in the catalog)" if kind.kind == "*" else f"`{kind.kind}`"
        read = kind.read.value + (", reported by the runtime watcher" if kind.watched else "")
        if kind.read is Read.RECHECKED:
            read = "every `RUNTIME_RECHECK_INTERVAL`" + (
                "; at once when the runtime watcher reports a change" if kind.watched else ""
            )
        rows.append(
            f"| {step.name} | {shown} | {_names(kind.names)} | {kind.description} | {read} "
            f"| {kind.repair} | {kind.deleted} |"
        )
    return "\n".join(rows)
