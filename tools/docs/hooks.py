"""MkDocs hooks of the documentation build (``mkdocs.yml``: ``hooks``).

- The references are generated pages: settings (:mod:`.environment`), ``manage.py`` commands
  (:mod:`.commands`), metrics (:mod:`.metrics`); what they cannot say (a setting, command or
  metric without a description) is a warning, which ``mkdocs build --strict`` turns into a failure.
- The OpenAPI schema is generated, validated and served with Redoc, all from installed packages.
- Placeholders in pages (``<!-- generated: NAME -->``) become what the code says: the layers of the
  import-linter contract, the forbidden imports, the API's operations.
- Every Mermaid diagram (the pages' and the README's) is parsed with Node before the build ends:
  a diagram that does not parse fails the build, whatever ``--strict`` says. The README's links to
  files of the repository are checked too.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # mkdocs loads this file by path; the references import the project
    sys.path.insert(0, str(ROOT))

from tools.docs import (
    commands,
    docstrings,
    environment,
    layers,
    mermaid,
    metrics,
    openapi,
    runtime_access,
)
from tools.docs.django_setup import setup as django_setup

# A logger under "mkdocs": its warnings count for --strict.
log = logging.getLogger("mkdocs.hooks.reference")
PLACEHOLDER = re.compile(r"<!-- generated: (?P<name>[a-z-]+)(?: (?P<argument>[^ ]+))? -->")
README_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_state: dict = {"diagrams": [], "schema": None}


def _warn_all(problems: list[str], what: str) -> None:
    for problem in problems:
        log.warning("%s: %s", what, problem)


def _generated_pages() -> dict[str, Callable[[], str]]:
    return {
        "reference/settings.md": environment.markdown,
        "reference/commands.md": commands.markdown,
        "reference/metrics.md": metrics.markdown,
    }


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    _state["diagrams"] = []
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    django_setup()
    _warn_all(environment.variables()[1], "settings reference")
    _warn_all(commands.problems(), "command reference")
    _warn_all(metrics.scan()[1], "metrics reference")
    _warn_all(environment.runtime_watcher_problems(), "runtime watcher settings")
    for path, render in _generated_pages().items():
        files.append(File.generated(config, path, content=render()))
    _state["schema"] = openapi.schema()
    files.append(File.generated(config, "api/openapi.json", content=json.dumps(_state["schema"], indent=1)))
    files.append(
        File.generated(
            config, "assets/javascripts/redoc.standalone.js", abs_src_path=str(openapi.redoc_bundle())
        )
    )
    if not mermaid.BUNDLE.exists():
        raise PluginError("tools/docs/mermaid is not installed: run `make docs` (it runs `npm ci` there)")
    files.append(
        File.generated(config, "assets/javascripts/mermaid.min.js", abs_src_path=str(mermaid.BUNDLE))
    )
    return files


def _placeholder(name: str, argument: str | None) -> str | None:
    if name == "benchmarks":
        return docstrings.benchmarks_table()
    if name == "docstring" and argument:
        return docstrings.markdown(argument)
    if name == "layers":
        return layers.layers_markdown()
    if name == "import-contracts":
        return layers.forbidden_table()
    if name == "runtime-access":
        return runtime_access.markdown()
    if name == "runtime-watcher-settings":
        return environment.runtime_watcher_markdown()
    if name == "openapi-operations":
        return openapi.operations_table(_state["schema"])
    return None


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    def replace(match: re.Match) -> str:
        text = _placeholder(match.group("name"), match.group("argument"))
        if text is None:
            log.warning("%s: unknown placeholder %s", page.file.src_uri, match.group(0))
            return match.group(0)
        return text

    markdown = PLACEHOLDER.sub(replace, markdown)
    _state["diagrams"] += mermaid.diagrams(markdown, page.file.src_uri)
    return markdown


def _readme_links() -> list[str]:
    """README.md's links to files of the repository that do not exist."""
    broken = []
    for match in README_LINK.finditer((ROOT / "README.md").read_text()):
        target = match.group("target").split("#", 1)[0]
        if (
            target
            and "://" not in target
            and not target.startswith("mailto:")
            and not (ROOT / target).exists()
        ):
            broken.append(target)
    return broken


def on_post_build(config: MkDocsConfig) -> None:
    for target in _readme_links():
        log.warning("README.md links to %s, which does not exist", target)
    found = [*_state["diagrams"], *mermaid.diagrams((ROOT / "README.md").read_text(), "README.md")]
    try:
        failures = mermaid.check(found)
    except mermaid.MermaidUnavailable as exc:
        raise PluginError(str(exc)) from None
    if failures:
        raise PluginError("Mermaid diagrams that do not parse:\n" + "\n".join(failures))
    log.info("%d Mermaid diagrams parse", len(found))
