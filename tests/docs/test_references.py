"""The handbook's generated references say something about everything they list.

The settings, command and metrics references are generated from the code at each documentation
build (``tools/docs/``); these tests fail when a setting, command (or one of its arguments) or
metric has no description, so ``make test`` catches it without building the site. They also hold
the generated lists to what the processes really read and expose, the kinds the document commands
name to the kinds registered, and the pages that explain a closed set (the reasons a Kyma shows,
the README's links) to that set.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from kernel.documents import registry
from kernel.metrics import ScrapeTimeCollector
from kernel.models import AuditEntry
from tools.docs import commands, environment, layers, metrics
from watchers.runtime.metrics import WatcherMetrics

ROOT = Path(__file__).resolve().parents[2]


# --- settings ------------------------------------------------------------------------------------


def test_every_environment_variable_the_code_reads_has_a_meaning_and_one_default():
    found, problems = environment.variables()
    assert problems == []
    assert {"DJANGO_DEBUG", "DATABASE_URL", "LISTENER_MODE", "WEB_THREADS"} <= {v.name for v in found}


def test_given_a_read_without_a_doc_comment_when_the_reference_is_built_then_it_is_named(tmp_path):
    settings = tmp_path / "controlplane" / "settings.py"
    settings.parent.mkdir()
    settings.write_text(
        'import environ\nenv = environ.Env()\n\n#: Described.\nA = env.int("A_SETTING", default=1)\n'
        'B = env.str("B_SETTING", default="x")\n'
    )
    (tmp_path / "deploy" / "gunicorn").mkdir(parents=True)
    found, problems = environment.variables(tmp_path)
    assert [v.name for v in found] == ["A_SETTING"]
    assert problems == [
        "B_SETTING has no meaning: add a '#:' comment above its read (controlplane/settings.py:6)"
    ]


def test_every_setting_of_the_runtime_watcher_is_in_its_table():
    assert environment.runtime_watcher_problems() == []


# --- commands ------------------------------------------------------------------------------------


def test_every_manage_py_command_its_subcommands_and_arguments_have_a_help_text():
    found = {command.name for command in commands.commands()}
    assert {"apply", "get", "pki", "serve", "up", "rollout", "credential", "token"} <= found
    assert commands.problems() == []


def _kind_helps() -> dict[str, set[str]]:
    """The words of each kind-taking command's help and of its ``kind`` argument's, as the
    reference shows them."""
    found = {}
    for command in commands.commands():
        if command.name in ("get", "describe", "delete", "apply"):
            texts = [command.help, *(a.help for a in command.arguments if a.names == "kind")]
            found[command.name] = set(re.findall(r"[A-Za-z]+", " ".join(texts)))
    return found


def _unnamed(helps: dict[str, set[str]]) -> list[str]:
    missing = [
        f"{command} --help: {word}"
        for kind in registry.listable()
        for command, word in (
            ("get", kind.plural),
            ("describe", kind.plural),
            ("describe", kind.kind.lower()),
        )
        if word not in helps[command]
    ]
    missing += [
        f"apply --help: {kind.kind}" for kind in registry.appliable() if kind.kind not in helps["apply"]
    ]
    return missing


def test_get_describe_and_apply_name_every_registered_kind_in_their_help():
    assert {"rollouts", "runtimewatchers"} <= {kind.plural for kind in registry.listable()}
    assert _unnamed(_kind_helps()) == []


class _GadgetKind(registry.ResourceKind):
    api_version = "example.io/v1"
    kind = "Gadget"
    plural = "gadgets"
    model = AuditEntry


def test_given_a_newly_registered_kind_when_the_reference_is_built_then_the_commands_name_it(monkeypatch):
    monkeypatch.setitem(registry._KINDS, (_GadgetKind.api_version, _GadgetKind.kind), _GadgetKind())
    helps = _kind_helps()
    assert {"gadgets", "gadget"} <= helps["get"] | helps["describe"] and "Gadget" in helps["apply"]
    assert _unnamed(helps) == []
    assert "gadgets" not in helps["delete"], "only kinds with a deleter are named by delete"


# --- metrics -------------------------------------------------------------------------------------


def test_every_metric_has_documentation_and_a_known_place():
    found, problems = metrics.scan()
    assert problems == []
    assert len({m.exposed for m in found}) == len(found), "two metrics share a name"


def _families(collected) -> dict[str, str]:
    return {family.name: family.documentation for family in collected}


@pytest.mark.django_db
def test_the_metrics_reference_is_what_the_registries_expose():
    """Static reading finds what a collector yields only with a database or a running beat; the
    registries that can run here must expose exactly the metrics read from their modules."""
    import listener.metrics

    scanned, _ = metrics.scan()
    by_path: dict[str, dict[str, str]] = {}
    for metric in scanned:
        by_path.setdefault(metric.path, {})[metric.family] = metric.documentation
    listener = {
        name: doc
        for name, doc in _families(REGISTRY.collect()).items()
        if name.startswith("watcher_listener_")
    }
    assert listener == by_path["listener/metrics.py"]
    watcher = _families(WatcherMetrics(CollectorRegistry()).registry.collect())
    assert watcher == by_path["watchers/runtime/metrics.py"]
    scrape_time = _families(ScrapeTimeCollector().collect())
    expected = {
        **by_path["fleet/metrics.py"],
        **by_path["pki/metrics.py"],
        **by_path["controlplane/metrics.py"],
    }
    assert scrape_time == expected


# --- pages that explain a closed set --------------------------------------------------------------


def _reasons_a_kyma_can_show() -> set[str]:
    """Reasons of conditions the reconciler sets to False (``ctx.condition(TYPE, FALSE, "Reason", ...)``)."""
    reasons: set[str] = set()
    for path in (ROOT / "reconciler").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "condition"
                and len(node.args) >= 3
                and isinstance(node.args[2], ast.Constant)
            ):
                status = node.args[1]
                false = (isinstance(status, ast.Name) and status.id == "FALSE") or (
                    isinstance(status, ast.Constant) and status.value == "False"
                )
                if false:
                    reasons.add(node.args[2].value)
    return reasons


def test_every_reason_a_kyma_can_show_is_explained_on_the_troubleshooting_page():
    reasons = _reasons_a_kyma_can_show()
    assert {"Unreachable", "WatcherSilent", "ApplyFailed"} <= reasons
    page = (ROOT / "docs" / "operators" / "troubleshooting.md").read_text()
    missing = sorted(reason for reason in reasons if f"`{reason}`" not in page)
    assert missing == []


def test_the_layers_pictures_name_every_layer_of_the_enforced_contracts_in_order():
    found = layers.layers_contracts()
    assert len(found) >= 2 and not found[0].get("containers"), "the house first, then the packages"
    for contract in found:
        picture = layers.layers_mermaid(contract)
        modules = [m for layer in contract["layers"] for m in layers.layer_modules(contract, layer)[0]]
        positions = [
            picture.index(f'"{m}') if f'"{m}' in picture else picture.index(f"<br/>{m}") for m in modules
        ]
        assert positions == sorted(positions), contract["name"]


def test_siblings_are_called_independent_only_when_the_contract_says_so():
    contract = {"layers": ["a | b", "c : d"], "containers": ["pkg"]}

    picture = layers.layers_mermaid(contract)

    assert "pkg.a<br/>pkg.b<br/><i>(independent of each other)</i>" in picture
    assert "pkg.c<br/>pkg.d<br/><i>(may import each other)</i>" in picture


def test_the_readme_is_a_front_door_whose_links_lead_somewhere():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    targets = [t.split("#", 1)[0] for t in re.findall(r"\]\(([^)\s]+)\)", readme)]
    local = [t for t in targets if t and "://" not in t]
    assert local, "the README links into the docs"
    assert [t for t in local if not (ROOT / t).exists()] == []
