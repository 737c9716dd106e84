"""Documents nested too deep, or YAML aliases that expand too far, are refused with a clear 4xx
at every door: the API (JSON and YAML), ``manage.py apply`` and the admin's JSON fields."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from fleet.models import Kyma
from kernel.documents.nesting import MAX_DEPTH, DocumentTooComplex, check_nesting, json_loads
from kernel.documents.yamlio import DocumentError, load_documents

VERY_DEEP_JSON = "[" * 100_000 + "]" * 100_000
VERY_DEEP_YAML = "spec: " + VERY_DEEP_JSON + "\n"
LEVELS = "abcdefghi"
BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join(['*' + below] * 10)}]\n" for below, name in itertools.pairwise(LEVELS)
)  # i: 10**9 values in 9 lines


def nested(depth: int) -> str:
    """A JSON object whose ``spec`` holds lists ``depth`` levels deep in all."""
    return '{"spec": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


class TestTheRule:
    def test_given_exactly_max_depth_then_accepted_and_one_more_then_refused(self):
        assert "spec" in json_loads(nested(MAX_DEPTH))
        with pytest.raises(DocumentTooComplex, match=f"nested deeper than {MAX_DEPTH} levels"):
            json_loads(nested(MAX_DEPTH + 1))

    def test_given_json_past_the_interpreter_recursion_limit_then_refused_not_recursion_error(self):
        with pytest.raises(DocumentTooComplex, match="body: document nested deeper than 100 levels"):
            json_loads(VERY_DEEP_JSON, source="body")

    def test_given_a_recursive_structure_then_refused(self):
        loop: list = []
        loop.append(loop)
        with pytest.raises(DocumentTooComplex, match="nested deeper"):
            check_nesting(loop)

    def test_given_yaml_at_the_limit_then_loaded_and_past_it_then_document_error(self):
        assert len(load_documents(nested(MAX_DEPTH))) == 1
        with pytest.raises(DocumentError, match=r"deep\.yaml: document nested deeper than 100 levels"):
            load_documents(nested(MAX_DEPTH + 1), source="deep.yaml")
        with pytest.raises(DocumentError, match=r"deep\.yaml: document nested deeper than 100 levels"):
            load_documents(VERY_DEEP_YAML, source="deep.yaml")

    def test_given_yaml_aliases_that_expand_exponentially_then_refused(self):
        with pytest.raises(DocumentError, match="expands to more than 1,000,000 values"):
            load_documents(BILLION_LAUGHS)

    def test_given_a_recursive_yaml_alias_then_refused(self):
        with pytest.raises(DocumentError, match="nested deeper"):
            load_documents("a: &a [*a]\n")


@pytest.mark.django_db
class TestApi:
    def test_given_very_deep_json_when_posted_then_400_saying_why(self, api):
        response = api.post("/api/v1/kymas/", data=VERY_DEEP_JSON, content_type="application/json")
        assert response.status_code == 400
        assert "nested deeper than 100 levels" in response.json()["detail"]

    def test_given_json_just_past_the_limit_when_posted_then_400(self, api):
        response = api.post("/api/v1/kymas/", data=nested(MAX_DEPTH + 1), content_type="application/json")
        assert response.status_code == 400
        assert "nested deeper than 100 levels" in response.json()["detail"]

    def test_given_very_deep_yaml_when_posted_then_400_saying_why(self, api):
        response = api.post("/api/v1/kymas/", data=VERY_DEEP_YAML.encode(), content_type="application/yaml")
        assert response.status_code == 400
        assert "nested deeper than 100 levels" in response.json()["detail"]

    def test_given_billion_laughs_when_posted_to_apply_then_400(self, api):
        response = api.post("/api/v1/apply/", data=BILLION_LAUGHS.encode(), content_type="application/yaml")
        assert response.status_code == 400
        assert "expands to more than" in response.json()["detail"]
        assert not Kyma.objects.exists()


@pytest.mark.django_db
class TestApplyCommand:
    @pytest.mark.parametrize("text", [VERY_DEEP_JSON, VERY_DEEP_YAML], ids=["json", "yaml"])
    def test_given_a_very_deep_file_when_applied_then_one_line_command_error(self, tmp_path: Path, text):
        path = tmp_path / "deep.yaml"
        path.write_text(text)
        with pytest.raises(CommandError) as failure:
            call_command("apply", "-f", str(path), stdout=io.StringIO(), stderr=io.StringIO())
        assert str(failure.value) == f"{path}: document nested deeper than 100 levels"


@pytest.mark.django_db
class TestAdmin:
    @pytest.mark.parametrize("modules", [VERY_DEEP_JSON, nested(MAX_DEPTH + 1)], ids=["huge", "just-past"])
    def test_given_deep_json_in_a_json_field_when_saved_then_form_error_not_500(self, admin_client, modules):
        response = admin_client.post(
            reverse("admin:controlplane_kyma_add"),
            {
                "namespace": "kcp-system",
                "name": "k-deep",
                "runtime_id": "rt-deep",
                "skr_domain": "k.example.com",
                "channel": "regular",
                "modules": modules,
                "labels": "{}",
                "annotations": "{}",
            },
        )
        assert response.status_code == 200
        assert "nested deeper than 100 levels" in response.content.decode()
        assert not Kyma.objects.filter(name="k-deep").exists()
