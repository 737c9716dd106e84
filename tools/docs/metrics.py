"""The metrics reference: every Prometheus metric the processes register, read from the code.

A metric is a call of one of ``prometheus_client``'s constructors (``Counter``, ``Gauge``,
``Histogram``, ... and the ``*MetricFamily`` classes of the scrape-time collectors) with a literal
name, documentation and labels; the module it is defined in says which process exposes it
(:data:`EXPOSED`). Reading the source finds the collectors that need a database or a running beat to
yield anything; ``tests/docs`` checks the list against what the registries really expose.
:func:`problems` names a metric without documentation, with a name that is not a literal, or in a
module whose exposure is not known here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
)
CONSTRUCTORS = {
    "Counter": "counter",
    "Gauge": "gauge",
    "Histogram": "histogram",
    "Summary": "summary",
    "Info": "info",
    "Enum": "stateset",
    "CounterMetricFamily": "counter",
    "GaugeMetricFamily": "gauge",
    "HistogramMetricFamily": "histogram",
    "SummaryMetricFamily": "summary",
    "InfoMetricFamily": "info",
    "StateSetMetricFamily": "stateset",
}
# Where the metrics of each module are exposed.
EXPOSED = {
    "fleet/metrics.py": "web `/metrics` (from the database, at scrape time)",
    "kernel/audit.py": "web `/metrics` (counted by each web process)",
    "access/metrics.py": "web `/metrics` (counted by each web process)",
    "pki/metrics.py": "web `/metrics` (from the database, at scrape time)",
    "controlplane/metrics.py": "web `/metrics` (from the database, at scrape time)",
    "listener/metrics.py": "listener side port `LISTENER_METRICS_BIND` `/metrics`",
    "controlplane/probes.py": "each beat's side port `BEAT_METRICS_BIND` `/metrics`",
    "watchers/runtime/metrics.py": "the runtime watcher in each runtime, `METRICS_PORT` `/metrics`",
}


@dataclass(frozen=True)
class Metric:
    name: str  # as defined
    kind: str
    documentation: str
    labels: tuple[str, ...]
    path: str
    line: int

    @property
    def exposed(self) -> str:
        """The name a scrape shows (counters end in ``_total``)."""
        if self.kind == "counter" and not self.name.endswith("_total"):
            return f"{self.name}_total"
        return self.name

    @property
    def family(self) -> str:
        """The metric family's name, as a registry reports it (without a counter's ``_total``)."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name


def _imported(tree: ast.Module) -> dict[str, str]:
    """Local name -> constructor, for names imported from prometheus_client."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prometheus_client"):
            for alias in node.names:
                if alias.name in CONSTRUCTORS:
                    names[alias.asname or alias.name] = alias.name
    return names


def _argument(call: ast.Call, index: int, keywords: tuple[str, ...]) -> ast.AST | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg in keywords), None)


def _assignments(tree: ast.Module) -> dict[str, ast.AST]:
    """Names bound once to a value anywhere in the module (labels kept in a variable)."""
    values: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
    return values


def _literal(node: ast.AST | None, names: dict[str, ast.AST] | None = None) -> object:
    if node is None:
        return None
    if isinstance(node, ast.Name) and names and node.id in names:
        node = names[node.id]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None


def scan(root: Path = ROOT) -> tuple[list[Metric], list[str]]:
    """Every metric defined in the scanned packages, and the problems of the reference."""
    found: list[Metric] = []
    problems: list[str] = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text())
            constructors = _imported(tree)
            names = _assignments(tree)
            calls = [
                node
                for node in ast.walk(tree)
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in constructors
            ]
            for call in sorted(calls, key=lambda c: c.lineno):
                constructor = constructors[call.func.id]  # type: ignore[union-attr]
                where = f"{relative}:{call.lineno}"
                name = _literal(_argument(call, 0, ("name",)))
                documentation = _literal(_argument(call, 1, ("documentation",)))
                labels = _literal(_argument(call, 2, ("labelnames", "labels")), names) or ()
                if not isinstance(name, str):
                    problems.append(f"{where}: a metric whose name is not a literal")
                    continue
                if not isinstance(documentation, str) or not documentation.strip():
                    problems.append(f"{where}: metric {name} has no documentation")
                    documentation = ""
                if relative not in EXPOSED:
                    problems.append(f"{where}: metric {name}: say where {relative}'s metrics are exposed")
                found.append(
                    Metric(
                        name, CONSTRUCTORS[constructor], documentation, tuple(labels), relative, call.lineno
                    )
                )
    return found, problems


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(root: Path = ROOT) -> str:
    """The metrics reference page."""
    found, _ = scan(root)
    by_place: dict[str, list[Metric]] = {}
    for metric in found:
        by_place.setdefault(EXPOSED.get(metric.path, metric.path), []).append(metric)
    out = [
        "# Metrics reference",
        "",
        "Every metric the processes register, generated from the code at each documentation build",
        "(`tools/docs/metrics.py`): its name as a scrape shows it, its type, labels and the",
        "documentation it carries (the `# HELP` line). Histograms add `_bucket`, `_sum` and `_count`",
        "series; counters also a `_created` series. Gauges computed from the database are the same",
        "whichever web process answers. [Monitoring](../operators/monitoring.md) has alerts built on them.",
        "",
        "Not listed: what the Prometheus client library reports of a process by itself (`process_*`,",
        "`python_gc_*`, `python_info`), served on the worker's and the beat's side ports",
        "(`controlplane/probes.py`). A worker's side port (`WORKER_METRICS_BIND`) serves nothing else.",
        "",
        f"{len(found)} metrics.",
        "",
    ]
    for place, metrics in by_place.items():
        out += [
            f"## {place[0].upper()}{place[1:]}",
            "",
            "| metric | type | labels | meaning |",
            "|---|---|---|---|",
        ]
        for m in metrics:
            labels = ", ".join(f"`{label}`" for label in m.labels) or "-"
            out.append(f"| `{m.exposed}` | {m.kind} | {labels} | {_cell(m.documentation)} |")
        out += ["", f"Defined in {', '.join(sorted({f'`{m.path}`' for m in metrics}))}.", ""]
    return "\n".join(out)
