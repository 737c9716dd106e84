"""kernel.services.resource_save: an update validates what it changes, and still every unique key
a change touches."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from fleet.models import ModuleConfig, SyncResource
from fleet.services import modules as module_services
from kernel.documents import registry
from kernel.documents.registry import DocumentsInvalid
from kernel.errors import ValidationFailed
from kernel.services import resource_save, stored_spec
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory

pytestmark = pytest.mark.django_db


def test_given_an_update_of_the_manifests_only_then_references_and_keys_are_not_queried_again():
    resource = SyncResourceFactory()
    resource.manifests = resource.manifests + "\n# changed\n"
    with CaptureQueriesContext(connection) as queries:
        assert resource_save(resource, before=stored_spec(resource))
    # the stored spec, the stored row, the UPDATE: no Kyma or Module lookup, no unique probe
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SELECT", "SELECT", "UPDATE"]
    stored = SyncResource.objects.get(pk=resource.pk)
    assert stored.generation == 2 and stored.manifests.endswith("# changed\n")


def test_given_a_rename_onto_a_taken_name_then_the_unique_key_is_still_checked():
    first = SyncResourceFactory(name="first")
    second = SyncResourceFactory(name="second", kyma=first.kyma, module=first.module)
    second.name = "first"
    with pytest.raises(ValidationFailed) as refused:
        resource_save(second, before=stored_spec(second))
    assert "already exists" in str(refused.value.errors) or "already exists" in refused.value.message


def test_given_an_unchanged_invalid_value_then_a_new_object_is_still_refused():
    resource = SyncResourceFactory.build(name="Not A DNS Name!")
    with pytest.raises(ValidationFailed):
        resource_save(resource, before=None)


def _new_config(kyma, module) -> ModuleConfig:
    return ModuleConfig(kyma=kyma, module=module, namespace=kyma.namespace, name=f"{kyma.name}-{module.name}")


def test_given_vouched_fields_when_creating_then_they_are_not_queried_and_the_database_keeps_the_key():
    kyma, module = KymaFactory(), ModuleFactory()
    with CaptureQueriesContext(connection) as queries:
        assert resource_save(_new_config(kyma, module), before=None, vouched=("kyma", "module", "uid"))
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["INSERT"]  # no lookups, no probes

    with pytest.raises(IntegrityError), transaction.atomic():  # the same (kyma, module) once more
        resource_save(_new_config(kyma, module), before=None, vouched=("kyma", "module", "uid"))


def test_given_nothing_vouched_when_creating_then_references_and_keys_are_checked():
    kyma, module = KymaFactory(), ModuleFactory()
    resource_save(_new_config(kyma, module), before=None)
    with pytest.raises(ValidationFailed) as refused:
        resource_save(_new_config(kyma, module), before=None)
    assert "already exists" in str(refused.value.errors) or "already exists" in refused.value.message


def test_given_a_manager_updates_its_sync_resource_through_the_api_then_no_savepoint_is_made(api):
    # The test runs in a transaction, so the document's own transaction is the one savepoint; the
    # services under it (apply, save) join it instead of making two more.
    resource = SyncResourceFactory()
    doc = {
        "apiVersion": "controlplane.kyma-project.io/v1alpha1",
        "kind": "SyncResource",
        "metadata": {"name": resource.name, "namespace": resource.namespace},
        "spec": {
            "kyma": resource.kyma.name,
            "module": resource.module.name,
            "manifests": resource.manifests + "\n# changed\n",
        },
    }
    with CaptureQueriesContext(connection) as queries:
        answer = api.post("/api/v1/syncresources/", doc, format="json")
    assert answer.status_code == 200, answer.content
    savepoints = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SAVEPOINT")]
    assert len(savepoints) == 1, savepoints
    assert SyncResource.objects.get(pk=resource.pk).manifests.endswith("# changed\n")


def test_given_one_of_several_documents_fails_in_its_service_then_every_problem_is_still_reported():
    resource = SyncResourceFactory()
    resource.deletion_timestamp = resource.created_at  # being deleted: the save service refuses it
    resource.finalizers = ["test"]
    resource.save()
    other = SyncResourceFactory(kyma=resource.kyma, module=resource.module, name="other")

    def doc(obj: SyncResource) -> dict:
        return {
            "apiVersion": "controlplane.kyma-project.io/v1alpha1",
            "kind": "SyncResource",
            "metadata": {"name": obj.name, "namespace": obj.namespace},
            "spec": {"kyma": obj.kyma.name, "module": obj.module.name, "manifests": obj.manifests + "\n#x\n"},
        }

    with pytest.raises(DocumentsInvalid) as refused:
        registry.apply_documents([doc(resource), doc(other), {"kind": "Nope"}])
    assert len(refused.value.failures) == 2  # the deleting one and the unknown kind; none applied
    assert not SyncResource.objects.get(pk=other.pk).manifests.endswith("#x\n")


def test_given_a_sync_resource_update_through_the_service_then_its_kyma_and_module_are_not_read_again():
    resource = SyncResourceFactory()
    kyma, module = resource.kyma, resource.module
    with CaptureQueriesContext(connection) as queries:
        module_services.syncresource_apply(
            kyma=kyma, module=module, name=resource.name, manifests=resource.manifests + "\n# changed\n"
        )
    tables = [
        q["sql"].split(" FROM ")[1].split()[0] for q in queries.captured_queries if " FROM " in q["sql"]
    ]
    assert '"controlplane_kyma"' not in tables and '"controlplane_module"' not in tables, tables
