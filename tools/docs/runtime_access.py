"""The rights the control plane needs in each runtime, as a table, from ``deploy/runtime-access/``
(which a test keeps equal to what the reconciler writes: ``manage.py runtime_access --base``)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = "deploy/runtime-access/runtime-access.yaml"


def markdown(root: Path = ROOT) -> str:
    rows = ["| scope | API group | resources | only these names | verbs |", "|---|---|---|---|---|"]
    for doc in yaml.safe_load_all((root / MANIFEST).read_text()):
        if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
            continue
        scope = "cluster" if doc["kind"] == "ClusterRole" else f"namespace `{doc['metadata']['namespace']}`"
        for rule in doc.get("rules", []):
            groups = ", ".join("every" if g == "*" else f"`{g}`" if g else "core" for g in rule["apiGroups"])
            resources = ", ".join("every kind" if r == "*" else f"`{r}`" for r in rule["resources"])
            names = ", ".join(f"`{n}`" for n in rule.get("resourceNames", [])) or "-"
            rows.append(f"| {scope} | {groups} | {resources} | {names} | {', '.join(rule['verbs'])} |")
    return "\n".join(rows)
