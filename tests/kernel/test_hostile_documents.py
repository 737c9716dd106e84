"""Documents a careless or hostile client sends get a 400 (or 409) with a JSON ``detail`` that names
the problem, never a 500, and nothing of them is stored: at the API (JSON and YAML) and at
``manage.py apply``. The suite runs on SQLite and on PostgreSQL (CI runs it on both), where NUL
characters and lone surrogates fail differently when they reach the database."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from fleet.models import Kyma, Module, SyncResource
from kernel.documents.nesting import MAX_INTEGER_DIGITS
from kernel.documents.registry import STALE_MESSAGE
from listener.models import WatchEventRecord
from pki import services as pki_services
from tests.factories import KymaFactory, ModuleFactory
from watchers.models import Watcher

pytestmark = pytest.mark.django_db

FLEET = "controlplane.kyma-project.io/v1alpha1"
OPERATOR = "operator.kyma-project.io/v1beta2"
HUGE = "9" * 5000


def post(api, url: str, body: object, *, yaml_body: bool = False):
    if yaml_body:
        text = body if isinstance(body, str) else yaml.safe_dump(body)
        return api.post(url, data=text, content_type="application/yaml")
    text = body if isinstance(body, str) else json.dumps(body)
    return api.post(url, data=text, content_type="application/json")


def refused(response, status: int = 400) -> str:
    """The answer is ``status`` with the JSON error shape; returns its detail."""
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    body = json.loads(response.content)
    assert isinstance(body["detail"], str) and body["detail"]
    return body["detail"]


def nothing_stored() -> None:
    assert not Module.objects.exists()
    assert not Watcher.objects.exists()
    assert not SyncResource.objects.exists()
    assert not Kyma.objects.exclude(name__startswith="kyma-").exists()


class TestDocumentsWithoutSpec:
    @pytest.mark.parametrize(
        ("url", "kind", "api_version"),
        [
            ("/api/v1/modules/", "Module", FLEET),
            ("/api/v1/watchers/", "Watcher", OPERATOR),
            ("/api/v1/syncresources/", "SyncResource", FLEET),
            ("/api/v1/apply/", "Module", FLEET),
            ("/api/v1/apply/", "Watcher", OPERATOR),
            ("/api/v1/apply/", "SyncResource", FLEET),
        ],
    )
    def test_given_no_spec_where_one_is_required_then_400_naming_spec(self, api, url, kind, api_version):
        doc = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "00"}}

        detail = refused(post(api, url, doc))

        assert "spec" in detail and "required" in detail
        nothing_stored()

    def test_given_a_kyma_without_spec_then_it_is_still_valid(self, api):
        doc = {
            "apiVersion": OPERATOR,
            "kind": "Kyma",
            "metadata": {"name": "bare", "namespace": "kcp-system"},
        }
        assert post(api, "/api/v1/kymas/", doc).status_code == 201


class TestMalformedFieldTypes:
    @pytest.mark.parametrize(
        ("doc", "field"),
        [
            ({"apiVersion": FLEET, "kind": ["Module"], "metadata": {"name": "m"}}, "kind"),
            ({"apiVersion": FLEET, "kind": {"a": 1}, "metadata": {"name": "m"}}, "kind"),
            ({"apiVersion": {"v": 1}, "kind": "Module", "metadata": {"name": "m"}}, "apiVersion"),
            (
                {"apiVersion": OPERATOR, "kind": "Kyma", "metadata": {"name": "k", "namespace": {"x": 1}}},
                "metadata.namespace",
            ),
        ],
        ids=["kind-list", "kind-object", "apiversion-object", "namespace-object"],
    )
    def test_given_a_field_of_the_wrong_type_on_apply_then_400_naming_it(self, api, doc, field):
        detail = refused(post(api, "/api/v1/apply/", [doc]))

        assert field in detail
        nothing_stored()


class TestNumbers:
    @pytest.mark.parametrize("url", ["/api/v1/apply/", "/api/v1/kymas/", "/api/v1/watchers/"])
    @pytest.mark.parametrize("as_yaml", [True, False], ids=["yaml", "json"])
    def test_given_a_5000_digit_integer_then_400_saying_it_is_too_large(self, api, url, as_yaml):
        kind, version = ("Watcher", OPERATOR) if "watchers" in url else ("Kyma", OPERATOR)
        text = (
            f"apiVersion: {version}\nkind: {kind}\nmetadata: {{name: big, namespace: kcp-system}}\n"
            f"spec: {{channel: {HUGE}}}\n"
            if as_yaml
            else f'{{"apiVersion": "{version}", "kind": "{kind}", "metadata": {{"name": "big"}}, '
            f'"spec": {{"channel": {HUGE}}}}}'
        )

        detail = refused(post(api, url, text, yaml_body=as_yaml))

        assert f"integer of 5000 digits is too large (at most {MAX_INTEGER_DIGITS})" in detail
        nothing_stored()

    @pytest.mark.parametrize("number", [".inf", "-.inf", ".nan", "1.0e+999"])
    def test_given_a_number_json_cannot_hold_in_yaml_then_400(self, api, number):
        text = (
            f"apiVersion: {FLEET}\nkind: Module\nmetadata: {{name: inf}}\n"
            "spec: {channels: {regular: '1.0'}, resource: {version: v1, kind: K, plural: ks}, "
            f"defaultCR: {{spec: {{x: {number}}}}}}}\n"
        )

        detail = refused(post(api, "/api/v1/modules/", text, yaml_body=True))

        assert "not finite" in detail
        nothing_stored()

    @pytest.mark.parametrize("number", ["1e999", "NaN", "-Infinity"])
    def test_given_a_number_json_cannot_hold_in_json_then_400(self, api, number):
        text = (
            f'{{"apiVersion": "{FLEET}", "kind": "Module", "metadata": {{"name": "inf"}}, "spec": '
            '{"channels": {"regular": "1.0"}, "resource": {"version": "v1", "kind": "K", "plural": "ks"}, '
            f'"defaultCR": {{"x": {number}}}}}}}'
        )

        refused(post(api, "/api/v1/modules/", text))

        nothing_stored()


def module_document(spec_extra: dict | None = None, name: str = "keda") -> dict:
    spec = {
        "channels": {"regular": "1.0.0"},
        "resource": {"version": "v1alpha1", "kind": "Keda", "plural": "kedas"},
        **(spec_extra or {}),
    }
    return {"apiVersion": FLEET, "kind": "Module", "metadata": {"name": name}, "spec": spec}


class TestUnstorableText:
    def test_given_a_nul_character_in_the_spec_then_400_on_every_database(self, api):
        response = post(api, "/api/v1/modules/", module_document({"defaultCR": {"note": "a\u0000b"}}))

        detail = refused(response)

        assert "spec.defaultCR.note: contains a NUL character" in detail
        nothing_stored()

    def test_given_a_nul_character_in_yaml_then_400(self, api):
        text = yaml.safe_dump(module_document({"defaultCR": {"note": "x"}})).replace(
            "note: x", 'note: "a\\0b"'
        )

        detail = refused(post(api, "/api/v1/modules/", text, yaml_body=True))

        assert "contains a NUL character" in detail
        nothing_stored()

    def test_given_an_unknown_key_that_is_a_lone_surrogate_then_a_renderable_400(self, api):
        text = json.dumps(module_document()).replace('"spec"', '"\\uD800": 1, "spec"', 1)

        detail = refused(post(api, "/api/v1/modules/", text))

        assert "lone surrogate (\\ud800)" in detail
        nothing_stored()

    def test_given_a_lone_surrogate_in_a_value_on_apply_then_400(self, api):
        text = json.dumps([module_document({"defaultCR": {"x": "PLACE"}})]).replace("PLACE", "\\udfff")

        detail = refused(post(api, "/api/v1/apply/", text))

        assert "spec.defaultCR.x: contains a lone surrogate" in detail
        nothing_stored()


class TestYamlAnswers:
    @pytest.fixture
    def pki(self):
        kyma = KymaFactory(skr_domain="c1.example.com")
        pki_services.ca_bootstrap()
        pki_services.certificate_for_kyma(kyma=kyma)
        pki_services.listener_material()
        WatchEventRecord.objects.create(
            kyma=kyma,
            received_at=timezone.now(),
            component="lifecycle-manager",
            contract="v2",
            outcome="queued",
        )
        return kyma

    @pytest.mark.parametrize("resource", ["certificates", "certificateauthorities", "events"])
    @pytest.mark.parametrize("how", ["format", "accept"])
    def test_given_yaml_asked_of_read_only_lists_and_details_then_yaml(self, api, pki, resource, how):
        ask = {"HTTP_ACCEPT": "application/yaml"} if how == "accept" else {}
        suffix = "?format=yaml" if how == "format" else ""

        listing = api.get(f"/api/v1/{resource}/{suffix}", **ask)

        assert listing.status_code == 200, listing.content[:300]
        assert listing["Content-Type"].startswith("application/yaml")
        page = yaml.safe_load(listing.content)
        for item in page["results"][:2]:
            detail = api.get(f"/api/v1/{resource}/{item.get('uid') or item['id']}/{suffix}", **ask)
            assert detail.status_code == 200
            assert yaml.safe_load(detail.content) == item


class TestStaleVersionOnApply:
    def test_given_a_stale_resource_version_then_409_with_the_message_of_every_write(self, api):
        kyma = KymaFactory(name="c-1")
        Kyma.objects.filter(pk=kyma.pk).update(resource_version=2)
        doc = {
            "apiVersion": OPERATOR,
            "kind": "Kyma",
            "metadata": {"name": "c-1", "namespace": "kcp-system", "resourceVersion": "1"},
            "spec": {"channel": "fast"},
        }

        detail = refused(post(api, "/api/v1/apply/", [doc]), status=409)

        assert STALE_MESSAGE in detail
        assert Kyma.objects.get(pk=kyma.pk).channel == "regular"
        body = json.loads(post(api, "/api/v1/apply/", [doc]).content)
        assert {
            "field": "documents[0].metadata.resourceVersion",
            "reason": "is 1, the stored object is at 2",
        } in (body["errors"])


ALIAS_BOMB = (
    f"apiVersion: {FLEET}\nkind: Module\nmetadata: {{name: bomb}}\n"
    "spec:\n  channels: {regular: '1.0.0'}\n  resource: {version: v1, kind: K, plural: ks}\n"
    "  defaultCR:\n"
    "    a: &a [x, x, x, x, x, x, x, x, x]\n"
    "    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    "    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "    e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
)


class TestAliases:
    def test_given_an_alias_bomb_of_nine_to_the_fifth_then_400(self, api):
        detail = refused(post(api, "/api/v1/apply/", ALIAS_BOMB, yaml_body=True))

        assert "YAML aliases expand the document" in detail and "at most 10-fold" in detail
        nothing_stored()

    def test_given_anchors_used_a_few_times_then_accepted(self, api):
        labels = ", ".join(f"k{i}: v" for i in range(50))
        text = (
            f"apiVersion: {FLEET}\nkind: Module\nmetadata: {{name: anchors}}\n"
            "spec:\n  channels: {regular: '1.0.0'}\n  resource: {version: v1, kind: K, plural: ks}\n"
            f"  defaultCR:\n    spec:\n      labels: &l {{{labels}}}\n      copies: [*l, *l, *l, *l]\n"
        )

        response = post(api, "/api/v1/modules/", text, yaml_body=True)

        assert response.status_code == 201, response.content[:300]
        assert Module.objects.get(name="anchors").default_cr["spec"]["copies"][3]["k49"] == "v"


class TestApplyCommand:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            (
                f"apiVersion: {FLEET}\nkind: [Module]\nmetadata: {{name: m}}\n",
                "kind must be a string, got array",
            ),
            (
                f"apiVersion: {OPERATOR}\nkind: Kyma\nmetadata: {{name: k, namespace: {{a: 1}}}}\n",
                "metadata.namespace: expected string, got object",
            ),
            (
                f"apiVersion: {FLEET}\nkind: Module\nmetadata: {{name: m}}\n",
                "spec: required field is missing",
            ),
            (f"apiVersion: {FLEET}\nkind: Module\nmetadata: {{name: m}}\nspec: {{x: {HUGE}}}\n", "too large"),
        ],
        ids=["kind-list", "namespace-object", "module-without-spec", "huge-integer"],
    )
    def test_given_a_malformed_document_then_a_clear_command_error_and_nothing_applied(
        self, tmp_path: Path, text, expected
    ):
        path = tmp_path / "docs.yaml"
        path.write_text(text)

        with pytest.raises(CommandError) as failed:
            call_command("apply", "-f", str(path), stdout=io.StringIO(), stderr=io.StringIO())

        assert expected in str(failed.value)
        nothing_stored()

    def test_given_a_module_in_the_catalog_the_apply_still_works(self, tmp_path: Path):
        ModuleFactory(name="keda")
        path = tmp_path / "ok.yaml"
        path.write_text(yaml.safe_dump(module_document(name="serverless")))
        out = io.StringIO()

        call_command("apply", "-f", str(path), stdout=out, stderr=io.StringIO())

        assert "module.controlplane.kyma-project.io/serverless created" in out.getvalue()
