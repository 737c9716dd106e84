"""Mermaid diagrams: found in Markdown, parsed at build time by Node with the site's own mermaid.

``tools/docs/mermaid`` pins mermaid (and jsdom, the DOM its parser needs) with a lockfile;
``make docs`` installs it with ``npm ci``. The same package's browser bundle is what the site
serves, so a diagram that parses here renders there, with no CDN.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent / "mermaid"
CHECK = HERE / "check.mjs"
BUNDLE = HERE / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})mermaid[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


class MermaidUnavailable(RuntimeError):
    """Node or the pinned packages are missing (run ``make docs``, which installs them)."""


@dataclass(frozen=True)
class Diagram:
    where: str  # page (and its n-th diagram)
    text: str


def diagrams(markdown: str, where: str) -> list[Diagram]:
    """The Mermaid blocks of a Markdown text."""
    return [
        Diagram(f"{where} (diagram {index})", textwrap.dedent(match.group("body")))
        for index, match in enumerate(FENCE.finditer(markdown), start=1)
    ]


def check(found: list[Diagram], *, timeout: float = 300) -> list[str]:
    """Parse every diagram; one line per diagram that does not parse."""
    if not found:
        return []
    node = shutil.which("node")
    if node is None or not BUNDLE.exists():
        raise MermaidUnavailable(
            "Mermaid diagrams cannot be checked: Node.js and the packages of tools/docs/mermaid are needed "
            "(make docs runs `npm ci` there)"
        )
    payload = json.dumps([{"id": str(i), "text": d.text} for i, d in enumerate(found)])
    done = subprocess.run(
        [node, str(CHECK)],
        input=payload,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=HERE,
    )
    if done.returncode != 0:
        raise MermaidUnavailable(f"the Mermaid check failed to run: {done.stderr.strip()[-2000:]}")
    failures = []
    for result in json.loads(done.stdout):
        if "error" in result:
            diagram = found[int(result["id"])]
            first = diagram.text.strip().splitlines()[0] if diagram.text.strip() else "(empty)"
            failures.append(f"{diagram.where}, starting '{first}': {result['error']}")
    return failures
