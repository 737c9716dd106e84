"""``manage.py apply`` tells every problem of every document at once, names a missing
apiVersion plainly, and warns (without failing) about a channel or module nobody offers."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from fleet.models import Kyma
from tests.factories import KymaFactory, ModuleFactory

pytestmark = pytest.mark.django_db

KYMA = """\
apiVersion: operator.kyma-project.io/v1beta2
kind: Kyma
metadata: {{name: {name}, namespace: kcp-system}}
spec: {spec}
"""


def apply(tmp_path: Path, text: str) -> tuple[str, str]:
    path = tmp_path / "docs.yaml"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    call_command("apply", "-f", str(path), stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_given_a_document_without_api_version_then_the_message_says_so(tmp_path):
    with pytest.raises(CommandError) as failed:
        apply(tmp_path, "kind: Kyma\nmetadata: {name: a}\nspec: {channel: regular}\n")
    message = str(failed.value)
    assert (
        "apiVersion: apiVersion is missing: a Kyma needs apiVersion: operator.kyma-project.io/v1beta2"
        in message
    )
    assert "None" not in message


def test_given_a_wrong_api_version_then_the_right_one_is_named(tmp_path):
    with pytest.raises(CommandError, match="unsupported apiVersion 'v1' for a Kyma; use operator"):
        apply(tmp_path, "apiVersion: v1\nkind: Kyma\nmetadata: {name: a}\nspec: {channel: regular}\n")


def test_given_bad_documents_and_one_failing_in_its_service_then_all_are_reported(tmp_path):
    broken_schema = KYMA.format(name="b", spec="{channel: 5, modules: [{name: 3}]}")
    KymaFactory(name="taken", runtime_id="rt-1")  # runtime ids are unique: the service refuses c
    broken_service = KYMA.format(name="c", spec="{channel: regular}").replace(
        "metadata: {name: c,", "metadata: {labels: {kyma-project.io/runtime-id: rt-1}, name: c,"
    )
    text = "kind: Kyma\nmetadata: {name: a}\n---\n" + broken_schema + "---\n" + broken_service
    with pytest.raises(CommandError) as failed:
        apply(tmp_path, text)
    message = str(failed.value)
    assert message.startswith("3 documents failed; nothing was applied")
    assert "document 1 (Kyma a):" in message
    assert "spec.channel: expected string" in message and "spec.modules[0].name: expected string" in message
    assert "document 3 (Kyma kcp-system/c):" in message
    assert list(Kyma.objects.values_list("name", flat=True)) == ["taken"]


def test_given_an_unknown_channel_and_module_then_applied_with_warnings(tmp_path):
    ModuleFactory(name="keda", channels={"regular": "1.0.0", "fast": "1.1.0"})
    out, err = apply(tmp_path, KYMA.format(name="w", spec="{channel: nightly, modules: [{name: kedda}]}"))
    assert out == "kyma.operator.kyma-project.io/w created\n"
    assert "Warning: kyma.operator.kyma-project.io/w: no module offers channel 'nightly'" in err
    assert "module 'kedda' is not in the catalog (known: keda)" in err
    assert Kyma.objects.filter(name="w").exists()


def test_given_a_known_channel_and_module_then_no_warning(tmp_path):
    ModuleFactory(name="keda", channels={"regular": "1.0.0"})
    out, err = apply(tmp_path, KYMA.format(name="ok", spec="{channel: regular, modules: [{name: keda}]}"))
    assert out.endswith("created\n") and err == ""
