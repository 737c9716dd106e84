"""A mandatory module in the catalog's documents: ``spec.mandatory`` or upstream's label on the
Module (``operator.kyma-project.io/mandatory-module: "true"``, as on a mandatory ModuleTemplate),
one model field either way, and the document shows both."""

from __future__ import annotations

import pytest

from fleet.models import Module
from fleet.resources.kinds import ModuleKind
from tests.fleet.test_documents import apply_yaml

pytestmark = pytest.mark.django_db

MODULE = """\
apiVersion: controlplane.kyma-project.io/v1alpha1
kind: Module
metadata:
  name: serverless
{extra}
spec:
  channels: {{regular: 1.0.0}}
  resource: {{group: operator.kyma-project.io, version: v1alpha1, kind: Serverless, plural: serverlesses}}
"""


@pytest.mark.parametrize(
    "extra",
    [
        '  labels: {"operator.kyma-project.io/mandatory-module": "true"}',
        "  labels: {}\n  annotations: {}",
    ],
    ids=["upstream's label", "spec.mandatory"],
)
def test_given_either_way_of_saying_it_then_the_module_is_mandatory(extra):
    text = MODULE.format(extra=extra)
    if "annotations" in extra:
        text = text.replace("spec:\n", "spec:\n  mandatory: true\n")

    apply_yaml(text)

    module = Module.objects.get(name="serverless")
    assert module.mandatory is True
    assert "operator.kyma-project.io/mandatory-module" not in module.labels  # the field says it
    doc = ModuleKind().to_document(module)
    assert doc["spec"]["mandatory"] is True
    assert doc["metadata"]["labels"]["operator.kyma-project.io/mandatory-module"] == "true"


def test_given_neither_then_it_is_not_mandatory_and_the_document_says_nothing_of_it():
    apply_yaml(MODULE.format(extra="  labels: {}"))

    module = Module.objects.get(name="serverless")
    doc = ModuleKind().to_document(module)
    assert module.mandatory is False and "mandatory" not in doc["spec"]
    assert "operator.kyma-project.io/mandatory-module" not in doc["metadata"].get("labels", {})
