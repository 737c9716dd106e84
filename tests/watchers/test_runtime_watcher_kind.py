"""``RuntimeWatcher`` (lifecycle-manager's ADR 009 name for the Watcher, same group and schema) is
accepted as an alias of Watcher by ``manage.py apply``/``get`` and ``POST /api/v1/apply/``."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from tests.console.test_api import post_yaml
from watchers.models import Watcher

pytestmark = pytest.mark.django_db

SAMPLE = Path("/work/shared/upstream/samples/kyma_watcher.yaml")


def runtime_watcher_document() -> str:
    """Upstream's Watcher sample (its first document) with the kind renamed."""
    text = SAMPLE.read_text().split("\n---\n")[0]
    assert "\nkind: Watcher\n" in text
    return text.replace("\nkind: Watcher\n", "\nkind: RuntimeWatcher\n", 1)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_given_a_runtime_watcher_file_when_applied_then_a_watcher_exists_and_get_lists_it(tmp_path):
    path = tmp_path / "rw.yaml"
    path.write_text(runtime_watcher_document())
    assert run("apply", "-f", str(path)).splitlines() == [
        "runtimewatcher.operator.kyma-project.io/watcher created"
    ]
    watcher = Watcher.objects.get(namespace="kcp-system", name="watcher")
    assert watcher.service_info["name"] == "klm-controller-manager-events"
    assert run("apply", "-f", str(path)).splitlines() == [
        "runtimewatcher.operator.kyma-project.io/watcher unchanged"
    ]

    table = run("get", "runtimewatchers").splitlines()
    assert table[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert table[1].split()[:2] == ["kcp-system", "watcher"]
    [doc] = yaml.safe_load_all(run("get", "runtimewatcher", "watcher", "-o", "yaml"))
    assert (doc["apiVersion"], doc["kind"]) == ("operator.kyma-project.io/v1beta2", "RuntimeWatcher")
    assert run("get", "watchers").splitlines()[1].split()[:2] == ["kcp-system", "watcher"]


def test_given_runtime_watcher_and_watcher_documents_of_one_object_then_either_updates_it(tmp_path):
    path = tmp_path / "rw.yaml"
    path.write_text(runtime_watcher_document())
    run("apply", "-f", str(path))
    path.write_text(runtime_watcher_document().replace('field: "spec"', 'field: "status"'))
    assert run("apply", "-f", str(path)).splitlines() == [
        "runtimewatcher.operator.kyma-project.io/watcher configured"
    ]
    assert Watcher.objects.get(name="watcher").field == "status"


def test_given_a_runtime_watcher_when_posted_to_the_api_then_a_watcher_exists(api):
    response = post_yaml(api, "/api/v1/apply/", runtime_watcher_document())
    assert response.status_code in (200, 201), response.content
    assert Watcher.objects.filter(namespace="kcp-system", name="watcher").exists()


def test_given_a_bad_runtime_watcher_when_posted_then_400_names_the_field(api):
    text = runtime_watcher_document().replace('field: "spec"', 'field: "everything"')
    response = post_yaml(api, "/api/v1/apply/", text)
    assert response.status_code == 400
    assert "spec.field" in str(response.json()["errors"])
    assert not Watcher.objects.exists()
