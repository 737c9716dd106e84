"""The architecture as import-linter enforces it, drawn from ``pyproject.toml``.

The ``layers`` contract becomes a Mermaid flowchart (each layer may import only the layers below
it; siblings joined by ``:`` are independent of each other), the ``forbidden`` contracts a table.
The pictures are generated at each documentation build, so they are the contracts ``make lint``
checks, not a drawing from memory.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def contracts(root: Path = ROOT) -> list[dict[str, Any]]:
    with (root / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["tool"]["importlinter"]["contracts"]


def layers_contract(root: Path = ROOT) -> dict[str, Any]:
    (contract,) = [c for c in contracts(root) if c["type"] == "layers"]
    return contract


def layers_mermaid(root: Path = ROOT) -> str:
    """A Mermaid flowchart of the layers contract, top to bottom."""
    contract = layers_contract(root)
    lines = ["flowchart TB"]
    for index, layer in enumerate(contract["layers"]):
        modules = [m.strip() for m in layer.split(":")]
        label = "<br/>".join(modules)
        if len(modules) > 1:
            label += "<br/><i>(independent of each other)</i>"
        lines.append(f'    L{index}["{label}"]')
    for index in range(len(contract["layers"]) - 1):
        lines.append(f"    L{index} --> L{index + 1}")
    return "\n".join(lines)


def forbidden_table(root: Path = ROOT) -> str:
    """The forbidden contracts as a Markdown table."""
    rows = ["| contract | modules | may not import |", "|---|---|---|"]
    for contract in contracts(root):
        if contract["type"] != "forbidden":
            continue
        sources = ", ".join(f"`{m}`" for m in contract["source_modules"])
        forbidden = ", ".join(f"`{m}`" for m in contract["forbidden_modules"])
        rows.append(f"| {contract['name']} | {sources} | {forbidden} |")
    return "\n".join(rows)
