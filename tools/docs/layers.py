"""The architecture as import-linter enforces it, drawn from ``pyproject.toml``.

Each ``layers`` contract becomes a Mermaid flowchart, top to bottom: the house's (the top-level
packages) first, then each package's own (its ``containers``). A layer may import only the layers
below it; in one layer, names joined by ``|`` are independent of each other (neither imports the
other), names joined by ``:`` are siblings that may import each other. The ``forbidden`` contracts
become a table. The pictures are generated at each documentation build, so they are the contracts
``make lint`` checks, not a drawing from memory.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def contracts(root: Path = ROOT) -> list[dict[str, Any]]:
    with (root / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["tool"]["importlinter"]["contracts"]


def layers_contracts(root: Path = ROOT) -> list[dict[str, Any]]:
    """Every layers contract, the house's (no ``containers``) first."""
    found = [c for c in contracts(root) if c["type"] == "layers"]
    return sorted(found, key=lambda c: bool(c.get("containers")))


def layer_modules(contract: dict[str, Any], layer: str) -> tuple[list[str], str]:
    """The full module names of one layer of ``contract`` and how they relate (``|`` or ``:``)."""
    joiner = "|" if "|" in layer else ":"
    names = [name.strip() for name in re.split(r"[|:]", layer)]
    (container,) = contract.get("containers") or [""]
    return [f"{container}.{name}" if container else name for name in names], joiner


def layers_mermaid(contract: dict[str, Any]) -> str:
    """A Mermaid flowchart of one layers contract, top to bottom."""
    lines = ["flowchart TB"]
    for index, layer in enumerate(contract["layers"]):
        modules, joiner = layer_modules(contract, layer)
        label = "<br/>".join(modules)
        if len(modules) > 1:
            relation = "independent of each other" if joiner == "|" else "may import each other"
            label += f"<br/><i>({relation})</i>"
        lines.append(f'    L{index}["{label}"]')
    for index in range(len(contract["layers"]) - 1):
        lines.append(f"    L{index} --> L{index + 1}")
    return "\n".join(lines)


def layers_markdown(root: Path = ROOT) -> str:
    """Each layers contract: its name and its picture."""
    parts = []
    for contract in layers_contracts(root):
        parts.append(f"**{contract['name']}**\n\n```mermaid\n{layers_mermaid(contract)}\n```")
    return "\n\n".join(parts)


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
