"""The settings reference: every environment variable the control plane reads, from the code.

A variable is found where it is read (``env.int("NAME", default=...)`` in the settings module,
``os.environ.get("NAME", ...)`` in the gunicorn configurations and the few commands that read one),
with its default taken from that call. Its meaning is the ``#:`` comment (Sphinx's doc-comment
convention) right above the line that reads it, or above the statement holding that line::

    #: Seconds between beat's scans for Kymas that are due.
    RECONCILE_SWEEP_INTERVAL: float = env.float("RECONCILE_SWEEP_INTERVAL", default=2)

A ``#: Default: ...`` line says the default in words where the code computes it (a secret
generated in debug mode, a value derived from another setting). :func:`problems` lists what the
reference cannot say (a variable without a meaning, described twice, with a computed default and no
words for it, or read with different defaults in different places); the tests and the docs build
fail on any.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "controlplane/settings.py"
# Where the control plane's own processes read the environment (the runtime watcher, which runs in
# each runtime, has its own table: watchers/runtime/__init__.py).
SCANNED = (
    "kernel",
    "controlplane",
    "fleet",
    "reconciler",
    "console",
    "watchers",
    "pki",
    "listener",
    "access",
    "deploy/gunicorn",
)
NOT_SCANNED = ("watchers/runtime", "/migrations/")
# Sections of the files other than the settings module (which has ``# --- Title ---`` lines).
FILE_SECTIONS = {
    "deploy/gunicorn/web.py": "Web role (gunicorn)",
    "deploy/gunicorn/listener.py": "Listener role (gunicorn)",
    "kernel/management/commands/ensureadmin.py": "The administrator of `make run`",
    "kernel/metrics.py": "Metrics",
    "listener/readiness.py": "Listener role (gunicorn)",
}
# Reads whose name is not a literal at the call: the names they read, by file.
INDIRECT = {"listener/readiness.py": ("LISTENER_CERTFILE", "LISTENER_KEYFILE", "LISTENER_CA_BUNDLE")}
ENV_METHODS = {"str", "int", "float", "bool", "list", "tuple", "dict", "json", "url", "db_url", "path"}
SECTION_LINE = re.compile(r"^# -{3}\s*(.+?)\s*-*$")


@dataclass(frozen=True)
class Read:
    """One place that reads a variable."""

    name: str
    path: str
    line: int
    has_default: bool
    default: object  # the literal default, or ``NOT_LITERAL``
    meaning: str
    default_words: str
    section: str


@dataclass
class Variable:
    name: str
    default: str
    meaning: str
    section: str
    readers: list[str] = field(default_factory=list)


class _NotLiteral:
    def __repr__(self) -> str:
        return "<computed>"


NOT_LITERAL = _NotLiteral()


def _files(root: Path) -> list[Path]:
    found: list[Path] = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if not any(part in f"/{relative}" for part in NOT_SCANNED):
                found.append(path)
    settings = root / SETTINGS
    return [settings, *[p for p in found if p != settings]]


def _is_os_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _literal(node: ast.AST | None) -> object:
    if node is None:
        return NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NOT_LITERAL


def _doc_comment(lines: list[str], line: int) -> list[str]:
    """The ``#:`` lines right above 1-based ``line``, top to bottom."""
    found: list[str] = []
    index = line - 2
    while index >= 0 and lines[index].strip().startswith("#:"):
        found.insert(0, lines[index].strip()[2:].strip())
        index -= 1
    return found


def _section(lines: list[str], line: int, path: str) -> str:
    if path != SETTINGS:
        return FILE_SECTIONS.get(path, path)
    for index in range(line - 1, -1, -1):
        match = SECTION_LINE.match(lines[index].strip())
        if match:
            return match.group(1)
    return "General"


def _statement_lines(tree: ast.AST) -> dict[int, int]:
    """For every line inside a statement, the statement's first line (innermost statement wins)."""
    first: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, ast.FunctionDef | ast.ClassDef | ast.If):
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                if line not in first or node.lineno > first[line]:
                    first[line] = node.lineno
    return first


def _calls(tree: ast.AST) -> list[tuple[ast.AST, ast.AST | None, bool, int]]:
    """(name node, default node, whether a default was given, line) of every read."""
    found: list[tuple[ast.AST, ast.AST | None, bool, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            func = node.func
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            if isinstance(func.value, ast.Name) and func.value.id == "env" and func.attr in ENV_METHODS:
                found.append((node.args[0], default, default is not None, node.lineno))
            elif (_is_os_environ(func.value) and func.attr == "get") or (
                isinstance(func.value, ast.Name) and func.value.id == "os" and func.attr == "getenv"
            ):
                value = node.args[1] if len(node.args) > 1 else None
                found.append((node.args[0], value, value is not None, node.lineno))
        elif (
            isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_os_environ(node.value)
        ):
            found.append((node.slice, None, False, node.lineno))
        elif isinstance(node, ast.Compare) and any(_is_os_environ(c) for c in node.comparators):
            found.append((node.left, None, False, node.lineno))
    return sorted(found, key=lambda read: read[3])


def reads(root: Path = ROOT) -> tuple[list[Read], list[str]]:
    """Every read of the environment in the scanned files, and the reads it cannot name."""
    found: list[Read] = []
    unnamed: list[str] = []
    for path in _files(root):
        relative = path.relative_to(root).as_posix()
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        statements = _statement_lines(tree)
        for name_node, default_node, has_default, line in _calls(tree):
            names = [name_node.value] if isinstance(name_node, ast.Constant) else []
            if not names or not isinstance(names[0], str):
                names = list(INDIRECT.get(relative, ()))
                if not names:
                    unnamed.append(f"{relative}:{line}: reads a variable whose name is not a literal")
                    continue
            comment = _doc_comment(lines, line)
            if not comment and statements.get(line, line) != line:
                comment = _doc_comment(lines, statements[line])
            words = [c for c in comment if c.startswith("Default:")]
            meaning = " ".join(c for c in comment if not c.startswith("Default:"))
            for name in names:
                found.append(
                    Read(
                        name=name,
                        path=relative,
                        line=line,
                        has_default=has_default,
                        default=_literal(default_node) if has_default else NOT_LITERAL,
                        meaning=meaning,
                        default_words=words[0].removeprefix("Default:").strip() if words else "",
                        section=_section(lines, line, relative),
                    )
                )
    return found, unnamed


def _comparable(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, int | float) or (isinstance(value, str) and re.fullmatch(r"-?\d+(\.\d+)?", value)):
        return repr(float(value))
    return str(value)


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "`1`" if value else "`0`"
    if isinstance(value, list | tuple):
        return f"`{','.join(str(v) for v in value)}`" if value else "empty"
    if value == "":
        return "empty"
    return f"`{value}`"


def variables(root: Path = ROOT) -> tuple[list[Variable], list[str]]:
    """The variables, in the order the code reads them, and the problems of the reference."""
    found, problems = reads(root)
    by_name: dict[str, list[Read]] = {}
    for read in found:
        by_name.setdefault(read.name, []).append(read)
    result: list[Variable] = []
    for name, places in by_name.items():
        described = [r for r in places if r.meaning]
        where = ", ".join(f"{r.path}:{r.line}" for r in places)
        if not described:
            problems.append(f"{name} has no meaning: add a '#:' comment above its read ({where})")
            continue
        if len(described) > 1:
            problems.append(f"{name} is described in several places ({where}): keep one '#:' comment")
        read = described[0]
        literals = {_comparable(r.default) for r in places if r.has_default and r.default is not NOT_LITERAL}
        if len(literals) > 1:
            problems.append(f"{name} is read with different defaults ({where}): {sorted(literals)}")
        words = next((r.default_words for r in places if r.default_words), "")
        literal = next(
            (r.default for r in places if r.has_default and r.default is not NOT_LITERAL), NOT_LITERAL
        )
        if words:
            default = words
        elif literal is not NOT_LITERAL:
            default = _shown(literal)
        else:
            problems.append(
                f"{name}: its default is computed or absent; say it with '#: Default: ...' ({where})"
            )
            default = ""
        result.append(Variable(name, default, read.meaning, read.section, sorted({r.path for r in places})))
    return result, problems


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(root: Path = ROOT) -> str:
    """The settings reference page."""
    found, _ = variables(root)
    sections: dict[str, list[Variable]] = {}
    for variable in found:
        sections.setdefault(variable.section, []).append(variable)
    out = [
        "# Settings reference",
        "",
        "Every environment variable the control plane's processes read, generated from the code at",
        "each documentation build (`tools/docs/environment.py`): the default is the one the code",
        "passes, the meaning the `#:` comment above the read. Defaults need no setup; with",
        "`DJANGO_DEBUG=0` the processes refuse to start without `DJANGO_SECRET_KEY`,",
        "`CONTROLPLANE_ENCRYPTION_KEYS` and `DJANGO_ALLOWED_HOSTS`. The runtime watcher, which runs",
        "inside each runtime, has settings of its own: see",
        "[Runtime watcher](../operators/runtime-watcher.md#settings).",
        "",
        f"{len(found)} variables.",
        "",
    ]
    for section, rows in sections.items():
        out += [f"## {section}", "", "| variable | default | meaning | read in |", "|---|---|---|---|"]
        for v in rows:
            readers = ", ".join(f"`{p}`" for p in v.readers)
            out.append(f"| `{v.name}` | {_cell(v.default)} | {_cell(v.meaning)} | {readers} |")
        out.append("")
    return "\n".join(out)


def documented_names(root: Path = ROOT) -> set[str]:
    """The variables the reference describes (for checks of what deploy/ sets)."""
    return {v.name for v in variables(root)[0]}


RUNTIME_WATCHER = "watchers/runtime/__init__.py"
RUNTIME_WATCHER_CONFIG = "watchers/runtime/config.py"


def runtime_watcher_rows(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """(variables, default, meaning) of the runtime watcher, from the table in its package
    docstring (a reStructuredText simple table)."""
    doc = ast.get_docstring(ast.parse((root / RUNTIME_WATCHER).read_text())) or ""
    lines = doc.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("=") and set(line) <= {"=", " "}]
    header, body_start, body_end = rules[0], rules[1], rules[2]
    spans = [(m.start(), m.end()) for m in re.finditer(r"=+", lines[header])]
    rows: list[list[str]] = []
    for line in lines[body_start + 1 : body_end]:
        cells = [
            line[start : (spans[i + 1][0] if i + 1 < len(spans) else None)].strip()
            for i, (start, _) in enumerate(spans)
        ]
        if cells[0]:
            rows.append(cells)
        elif rows:
            rows[-1][2] = f"{rows[-1][2]} {cells[2]}".strip()
    return [(r[0], r[1], re.sub(r"``([^`]+)``", r"`\1`", r[2])) for r in rows]


def runtime_watcher_problems(root: Path = ROOT) -> list[str]:
    """Variables the runtime watcher reads that its table does not list, and the reverse."""
    listed = {name.strip() for row in runtime_watcher_rows(root) for name in row[0].split(",")}
    source = (root / RUNTIME_WATCHER_CONFIG).read_text()
    start = source.index("def from_env")
    read = set(re.findall(r'(?:env\.get\(|env, |\()"([A-Z][A-Z0-9_]{2,})"', source[start:]))
    return [
        f"the runtime watcher reads {name}, which its table ({RUNTIME_WATCHER}) does not list"
        for name in sorted(read - listed)
    ] + [
        f"{RUNTIME_WATCHER} lists {name}, which the runtime watcher does not read"
        for name in sorted(listed - read)
    ]


def runtime_watcher_markdown(root: Path = ROOT) -> str:
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for names, default, meaning in runtime_watcher_rows(root):
        shown = ", ".join(f"`{n.strip()}`" for n in names.split(","))
        rows.append(f"| {shown} | {_cell(default)} | {_cell(meaning)} |")
    return "\n".join(rows)
