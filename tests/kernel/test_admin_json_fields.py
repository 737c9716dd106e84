"""Every JSON textarea of the admin parses as every door parses: what no door accepts (a 5,000-digit
integer, a document nested 100,000 levels) is a field error on the form shown again, never a 500."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.forms import JSONField
from django.test import RequestFactory
from django.urls import reverse

from fleet.models import Kyma, MaintenancePolicy, Module
from kernel.fields import BoundedJSONField
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db

HUGE_INTEGER = "9" * 5000
VERY_DEEP = "[" * 100_000 + "]" * 100_000
TOO_MANY_DIGITS = "an integer of 5000 digits is too large (at most 308)"
TOO_DEEP = "nested deeper than 100 levels"


def _json_fields(form_class: type) -> dict[str, object]:
    return {name: field for name, field in form_class.base_fields.items() if isinstance(field, JSONField)}


def test_given_every_registered_admin_then_each_json_field_of_its_forms_is_bounded(admin_user):
    request = RequestFactory().get("/admin/")
    request.user = admin_user
    unbounded = []
    for model, model_admin in admin.site._registry.items():
        for change in (False, True):
            form_class = model_admin.get_form(request, None, change=change)
            for name, field in _json_fields(form_class).items():
                if not isinstance(field, BoundedJSONField):
                    unbounded.append(f"{model._meta.label}.{name}")
    assert not unbounded, f"admin JSON fields Django parses unbounded (a 500 on hostile input): {unbounded}"


KYMA_FORM = {
    "namespace": "kcp-system",
    "name": "k-hostile",
    "runtime_id": "rt-hostile",
    "skr_domain": "k.example.com",
    "channel": "regular",
    "modules": "[]",
    "labels": "{}",
    "annotations": "{}",
}
MODULE_FORM = {
    "name": "hostile",
    "channels": '{"regular": "1.0.0"}',
    "labels": "{}",
    "annotations": "{}",
}
POLICY_FORM = {"policy": '{"rules": []}'}


@pytest.mark.parametrize(
    ("url", "form", "field", "stored"),
    [
        ("admin:controlplane_kyma_add", KYMA_FORM, "labels", Kyma.objects.all),
        ("admin:controlplane_module_add", MODULE_FORM, "labels", Module.objects.all),
        ("admin:controlplane_maintenancepolicy_add", POLICY_FORM, "policy", MaintenancePolicy.objects.all),
    ],
    ids=["kyma", "module", "maintenance-policy"],
)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f'{{"a": {HUGE_INTEGER}}}', TOO_MANY_DIGITS),
        (VERY_DEEP, TOO_DEEP),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": 1', "Enter a valid JSON: Expecting &#x27;,&#x27; delimiter (line 1, column 8)."),
    ],
    ids=["5000-digits", "100000-deep", "nan", "malformed"],
)
def test_given_hostile_json_in_an_admin_field_when_added_then_the_form_says_why_and_nothing_is_stored(
    admin_client, url, form, field, stored, text, message
):
    response = admin_client.post(reverse(url), {**form, field: text})

    assert response.status_code == 200
    page = response.content.decode()
    assert message in page
    assert 'class="errorlist' in page
    assert not stored().exists()


def test_given_a_kyma_form_whose_opened_state_is_hostile_then_the_form_comes_back_not_500(admin_client):
    kyma = KymaFactory(name="c-1")
    Kyma.objects.filter(pk=kyma.pk).update(resource_version=kyma.resource_version + 1)
    form = {
        **KYMA_FORM,
        "name": "c-1",
        "runtime_id": kyma.runtime_id,
        "skr_domain": kyma.skr_domain,
        "opened_version": str(kyma.resource_version),
        "opened_state": VERY_DEEP,
    }

    response = admin_client.post(reverse("admin:controlplane_kyma_edit", args=[kyma.pk]), form)

    assert response.status_code == 200
    assert "This object was changed since you opened this form" in response.content.decode()
