"""kernel.services.resource_save: an update validates what it changes, and still every unique key
a change touches."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from fleet.models import ModuleConfig, SyncResource
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
