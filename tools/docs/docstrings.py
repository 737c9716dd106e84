"""A module's docstring as a section of a page (``<!-- generated: docstring PATH -->``).

The docstrings that describe a piece before its code (the runtime emulator, envtest's stand-ins,
the reconcile queue) are the best description of it there is; the pages show them rather than a
copy that would drift. The little reStructuredText they use becomes Markdown: ``--- `` underlined
titles become headings, a paragraph ending in ``::`` introduces its indented code block, roles
become code.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`~?([^`]+)`")


def markdown(path: str, *, level: int = 3, root: Path = ROOT) -> str:
    doc = ast.get_docstring(ast.parse((root / path).read_text()))
    if doc is None:
        raise ValueError(f"{path} has no module docstring")
    lines = doc.splitlines()
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        underline = lines[index + 1] if index + 1 < len(lines) else ""
        if (
            line.strip()
            and re.fullmatch(r"-{3,}|={3,}", underline.strip())
            and len(underline) >= len(line) - 2
        ):
            out.append(f"{'#' * level} {line.strip()}")
            index += 2
            continue
        if line.rstrip().endswith("::"):
            line = line.rstrip()[:-1]
        out.append(line)
        index += 1
    text = "\n".join(out)
    return ROLE.sub(r"`\1`", text)


def benchmarks_table(root: Path = ROOT) -> str:
    """Every benchmark (a ``bench/*.py`` that runs as a script, as ``tests/bench`` finds them) with
    the first line of its docstring."""
    rows = ["| benchmark | what it measures |", "|---|---|"]
    for path in sorted((root / "bench").glob("*.py")):
        source = path.read_text()
        if not re.search(r"""__name__ == ["']__main__["']""", source):
            continue
        doc = ast.get_docstring(ast.parse(source)) or ""
        rows.append(f"| `bench/{path.name}` | {doc.splitlines()[0] if doc else ''} |")
    return "\n".join(rows)
