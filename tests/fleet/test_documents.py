"""Kubernetes-style documents: upstream CR YAML in, the same shape out, precise errors."""

from __future__ import annotations

import base64
import json

import pytest

from fleet.models import Kyma
from kernel.documents import registry
from kernel.documents.yamlio import DocumentError, _json_documents, _yaml_documents, dump_yaml, load_documents
from kernel.errors import ApplicationError
from watchers.models import Watcher

pytestmark = pytest.mark.django_db

UPSTREAM_KYMA = """\
apiVersion: operator.kyma-project.io/v1beta2
kind: Kyma
metadata:
  name: 3d1f0b6c-runtime
  namespace: kcp-system
  labels:
    kyma-project.io/runtime-id: 3d1f0b6c-runtime
    kyma-project.io/global-account-id: ga-1
  annotations:
    skr-domain: c-3d1f0b6c.kyma.example.com
spec:
  channel: regular
  modules:
  - name: keda
    customResourcePolicy: CreateAndDelete
    managed: true
  - name: btp-operator
    channel: fast
    customResourcePolicy: Ignore
    managed: false
"""

UPSTREAM_WATCHER = """\
apiVersion: operator.kyma-project.io/v1beta2
kind: Watcher
metadata:
  name: klm-watcher
  namespace: kcp-system
  labels:
    operator.kyma-project.io/managed-by: lifecycle-manager
spec:
  labelsToWatch:
    operator.kyma-project.io/watched-by: kyma
  resourceToWatch:
    group: operator.kyma-project.io
    version: '*'
    resource: kymas
  field: spec
  serviceInfo:
    name: klm-controller-manager-events
    namespace: kcp-system
    port: 8082
  gateway:
    selector:
      matchLabels:
        operator.kyma-project.io/watcher-gateway: default
"""


def apply_yaml(text: str) -> list[registry.ApplyResult]:
    return registry.apply_documents(load_documents(text))


def without_server_fields(doc: dict) -> dict:
    doc = {k: v for k, v in doc.items() if k != "status"}
    doc["metadata"] = {
        k: v
        for k, v in doc["metadata"].items()
        if k not in ("uid", "resourceVersion", "generation", "creationTimestamp")
    }
    return doc


class TestRoundTrip:
    @pytest.mark.parametrize("text", [UPSTREAM_KYMA, UPSTREAM_WATCHER])
    def test_given_upstream_cr_when_applied_and_read_back_then_the_shape_is_the_same(self, text):
        [result] = apply_yaml(text)
        assert result.outcome == "created"
        rendered = result.kind.to_document(result.obj)
        assert without_server_fields(rendered) == load_documents(text)[0]

    @pytest.mark.parametrize("text", [UPSTREAM_KYMA, UPSTREAM_WATCHER])
    def test_given_rendered_yaml_when_applied_again_then_nothing_changes(self, text):
        [result] = apply_yaml(text)
        again = dump_yaml([result.kind.to_document(result.obj)])
        [second] = apply_yaml(again)
        assert second.outcome == "unchanged"
        result.obj.refresh_from_db()
        assert result.obj.generation == 1

    def test_given_upstream_kyma_when_applied_then_identity_fields_come_from_label_and_annotation(self):
        apply_yaml(UPSTREAM_KYMA)
        kyma = Kyma.objects.get()
        assert kyma.runtime_id == "3d1f0b6c-runtime"
        assert kyma.skr_domain == "c-3d1f0b6c.kyma.example.com"
        assert kyma.labels == {"kyma-project.io/global-account-id": "ga-1"}

    def test_given_watcher_without_gateway_when_applied_then_upstream_default_selector_is_stored(self):
        text = UPSTREAM_WATCHER.split("  gateway:")[0]
        apply_yaml(text)
        watcher = Watcher.objects.get()
        assert watcher.gateway == {
            "selector": {"matchLabels": {"operator.kyma-project.io/watcher-gateway": "default"}}
        }
        assert watcher.component == "lifecycle-manager"


class TestErrors:
    def errors_of(self, text: str) -> dict[str, str]:
        with pytest.raises(registry.DocumentsInvalid) as failure:
            apply_yaml(text)
        return dict(failure.value.errors)

    def test_given_unknown_fields_and_wrong_types_when_applied_then_each_path_is_named(self):
        text = UPSTREAM_KYMA.replace("  channel: regular", "  channel: 7\n  colour: blue").replace(
            "managed: true", "managed: 'yes'"
        )
        errors = self.errors_of(text)
        assert errors["documents[0].spec.channel"] == "expected string, got integer"
        assert errors["documents[0].spec.colour"] == "unknown field"
        assert errors["documents[0].spec.modules[0].managed"] == "expected boolean, got string"

    def test_given_watcher_missing_required_fields_when_applied_then_they_are_listed(self):
        errors = self.errors_of(
            "apiVersion: operator.kyma-project.io/v1beta2\nkind: Watcher\nmetadata: {name: w}\nspec: {}\n"
        )
        for field in ("serviceInfo", "resourceToWatch", "field"):
            assert errors[f"documents[0].spec.{field}"] == "required field is missing"

    def test_given_unsupported_kind_when_applied_then_supported_kinds_are_listed(self):
        errors = self.errors_of("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
        assert "supported:" in errors["documents[0].kind"]

    def test_given_one_bad_document_when_applying_many_then_nothing_is_applied(self):
        text = UPSTREAM_WATCHER + "---\n" + UPSTREAM_KYMA.replace("channel: fast", "channel: none")
        self.errors_of(text)
        assert not Watcher.objects.exists() and not Kyma.objects.exists()

    def test_given_model_rule_broken_when_applied_then_error_uses_the_document_path(self):
        text = UPSTREAM_KYMA.replace("name: btp-operator", "name: keda")
        errors = self.errors_of(text)
        assert errors["documents[0].spec.modules[1].name"].startswith("duplicate module 'keda'")

    def test_given_moduleconfig_document_when_applied_then_it_is_refused_as_read_only(self):
        errors = self.errors_of(
            "apiVersion: controlplane.kyma-project.io/v1alpha1\nkind: ModuleConfig\nmetadata: {name: x}\n"
        )
        assert "written by the control plane" in errors["documents[0]"]


class TestKubeconfigSecret:
    KUBECONFIG = (
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
        "users: [{name: u, user: {token: abc}}]\n"
    )

    def secret(self, kyma_name: str, encoded: str) -> str:
        return (
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: kubeconfig-x\n  namespace: kcp-system\n"
            "  labels:\n"
            f"    operator.kyma-project.io/kyma-name: {kyma_name}\ndata:\n  config: {encoded}\n"
        )

    def test_given_upstream_access_secret_when_applied_then_the_kyma_gets_its_kubeconfig(self):
        encoded = base64.b64encode(self.KUBECONFIG.encode()).decode()
        apply_yaml(UPSTREAM_KYMA + "---\n" + self.secret("3d1f0b6c-runtime", encoded))
        assert Kyma.objects.get().kubeconfig.reveal() == self.KUBECONFIG

    def test_given_secret_for_unknown_kyma_when_applied_then_not_found_is_reported(self):
        encoded = base64.b64encode(self.KUBECONFIG.encode()).decode()
        with pytest.raises(registry.DocumentsInvalid) as failure:
            apply_yaml(self.secret("nobody", encoded))
        assert "no Kyma kcp-system/nobody" in failure.value.message

    def test_given_secret_with_bad_base64_when_applied_then_the_field_is_named(self):
        apply_yaml(UPSTREAM_KYMA)
        with pytest.raises(registry.DocumentsInvalid) as failure:
            apply_yaml(self.secret("3d1f0b6c-runtime", "not base64!"))
        assert dict(failure.value.errors)["documents[0].data.config"] == "is not base64 of UTF-8 text"

    def test_given_secrets_when_listing_kinds_then_secrets_are_not_listable(self):
        with pytest.raises(ApplicationError):
            registry.for_name("secrets")


class TestStoredText:
    """Stored text (validated when it was stored) is parsed by libyaml: to the very same objects."""

    MIXED = (
        "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n"
        "---\nwhen: 2024-01-01T10:00:00Z\nflags: [yes, no, on, 'off', ~, 0x1F, 1.5e3, -2.5]\n"
        'text: |\n  two\n  lines\nanchor: &x {k: v}\nalias: *x\nunicode: "\\u00e9\\t"\n---\n'
    )

    @pytest.mark.parametrize("text", [UPSTREAM_KYMA, UPSTREAM_WATCHER, MIXED])
    def test_given_stored_text_then_libyaml_gives_what_the_python_loader_gives(self, text):
        assert load_documents(text, stored=True) == load_documents(text)

    def test_given_stored_text_then_timestamps_stay_strings(self):
        assert load_documents(self.MIXED, stored=True)[1]["when"] == "2024-01-01T10:00:00Z"


class TestJsonDocuments:
    """JSON objects between ``---`` lines (what the SDK's managers send) are read by the JSON
    parser, to what the YAML loader gives for them; anything else still goes to the YAML loader."""

    DOCS = (
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "kyma-system"}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "x"}},
            "spec": {
                "replicas": 3,
                "paused": False,
                "ratio": 0.25,
                "note": None,
                "args": ["--a=1", 'é \t \u2603 \\ "q"', "2024-01-01T10:00:00Z", "yes", "0x1F"],
            },
        },
    )

    @pytest.mark.parametrize("separator", ["\n---\n", "\n---  \n\n", "\n---\n---\n"])
    @pytest.mark.parametrize("indent", [None, 2])
    def test_given_json_documents_then_they_are_what_the_yaml_loader_gives(self, separator, indent):
        text = separator.join(json.dumps(doc, indent=indent) for doc in self.DOCS)
        assert _json_documents(text) is not None  # the JSON parser read it
        yaml_read = [d for d in _yaml_documents(text, source="t", stored=False) if d is not None]
        assert load_documents(text) == load_documents(text, stored=True) == yaml_read == list(self.DOCS)

    @pytest.mark.parametrize(
        "text",
        [
            '{"a": 1}\n---\nb: 2\n',  # YAML after JSON
            '--- {"a": 1}\n',  # a document start marker on the JSON's line
            '# comment\n{"a": 1}\n',
            '{"a": NaN}\n',  # not JSON: YAML reads a plain string
            "{a: 1}\n",  # YAML flow mapping, not JSON
        ],
    )
    def test_given_text_that_is_not_only_json_objects_then_the_yaml_loader_reads_it(self, text):
        assert _json_documents(text) is None
        assert load_documents(text) == [d for d in _yaml_documents(text, source="t", stored=False) if d]

    def test_given_json_with_a_syntax_error_then_the_error_names_line_and_column(self):
        with pytest.raises(DocumentError, match=r"manifests: invalid YAML at line 3, column 11"):
            load_documents('{"a": 1}\n---\n{"b": [1, }\n', source="manifests")

    def test_given_json_nested_past_the_bound_then_it_is_refused_without_crashing(self):
        deep = '{"a": ' * 100_000 + "1" + "}" * 100_000
        with pytest.raises(DocumentError, match="nest"):
            load_documents(deep, source="manifests")
        shallow_but_too_deep = '{"a": ' * 200 + "1" + "}" * 200
        with pytest.raises(DocumentError, match="nest"):
            load_documents(shallow_but_too_deep, source="manifests")

    def test_given_json_exponent_numbers_then_they_are_numbers_as_in_kubernetes(self):
        assert load_documents('{"a": 1e5, "b": 2E-1}') == [{"a": 100000.0, "b": 0.2}]
