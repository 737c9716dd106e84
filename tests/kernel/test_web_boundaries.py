"""The web role's edges: bodies too big are a 413 in JSON before anything reads them (with and
without DEBUG, and readable by an ordinary client of the real server), gunicorn's own errors are
JSON, a pasted kubeconfig never comes back in a page, and answers match the OpenAPI schema."""

from __future__ import annotations

import http.client
import json

import jsonschema
import pytest
import requests
from django.conf import settings
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from fleet.models import Kyma, SyncResource
from pki import services as pki_services
from tests.factories import KymaFactory
from tests.support.processes import start_web

TWELVE_MB = 12 * 1024 * 1024
TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6InNlY3JldC10b2tlbiJ9.very-secret-token"
KUBECONFIG = f"""\
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://c.example.com"}}}}]
users: [{{name: u, user: {{token: {TOKEN}}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


@pytest.mark.django_db
class TestBodyLimit:
    @pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])
    def test_given_a_12_mb_body_then_413_json_and_nothing_stored(self, api, settings, debug):
        settings.DEBUG = debug
        body = json.dumps({"spec": {"manifests": "x" * TWELVE_MB}})

        response = api.post("/api/v1/syncresources/", data=body, content_type="application/json")

        assert response.status_code == 413
        assert response["Content-Type"] == "application/json"
        assert "is larger than the 4,194,304 bytes accepted" in json.loads(response.content)["detail"]
        assert not SyncResource.objects.exists()

    def test_given_a_body_under_the_limit_then_it_is_read_as_before(self, api):
        kyma = KymaFactory(name="c-1")
        body = {
            "apiVersion": "operator.kyma-project.io/v1beta2",
            "kind": "Kyma",
            "metadata": {"name": "c-1", "namespace": "kcp-system", "annotations": {"note": "y" * 1_500_000}},
            "spec": {"channel": "fast"},
        }

        response = api.put(f"/api/v1/kymas/{kyma.uid}/", data=body, format="json")

        assert response.status_code == 200, response.content[:300]
        assert Kyma.objects.get(pk=kyma.pk).channel == "fast"


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        process, url = start_web(
            DJANGO_DEBUG="0",  # production: Django's own answer would have been its HTML 400 page
            DJANGO_SECRET_KEY="s" * 60,
            DJANGO_ALLOWED_HOSTS="127.0.0.1",
            CONTROLPLANE_ENCRYPTION_KEYS=",".join(settings.ENCRYPTION_KEYS),
            DJANGO_SECURE_SSL_REDIRECT="0",
        )
    yield url
    process.stop()


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
class TestRealWebServer:
    def test_given_a_12_mb_body_then_requests_reads_a_413_json(self, web):
        response = requests.post(
            f"{web}/api/v1/syncresources/",
            data=b"{" + b" " * TWELVE_MB + b"}",
            headers={"Content-Type": "application/json", "Authorization": "Token kcp_nothing"},
            timeout=30,
        )

        assert response.status_code == 413
        assert response.headers["Content-Type"] == "application/json"
        assert "larger than" in response.json()["detail"]

    def test_given_a_request_line_over_gunicorns_limit_then_414_json(self, web):
        host, port = web.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request("GET", "/api/v1/kymas/?q=" + "a" * 5000)
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()

        assert response.status == 414
        assert response.getheader("Content-Type") == "application/json"
        assert "Request Line is too large" in json.loads(body)["detail"]


@pytest.mark.django_db
def test_given_the_kyma_form_comes_back_with_an_error_then_the_pasted_kubeconfig_is_not_in_it(admin_client):
    kyma = KymaFactory(name="c-1")
    url = reverse("admin:controlplane_kyma_edit", args=[kyma.pk])
    form = {
        "namespace": "kcp-system",
        "name": "c-1",
        "runtime_id": kyma.runtime_id,
        "skr_domain": kyma.skr_domain,
        "channel": "NOT A CHANNEL",  # refused: the form comes back
        "modules": "[]",
        "labels": "{}",
        "annotations": "{}",
        "kubeconfig_new": KUBECONFIG,
        "opened_version": kyma.resource_version,
    }

    page = admin_client.post(url, form)

    assert page.status_code == 200  # the form again, with its error
    assert b"lower-case letters only" in page.content
    assert TOKEN.encode() not in page.content
    assert not Kyma.objects.get(pk=kyma.pk).kubeconfig


@pytest.mark.django_db
def test_given_the_listener_certificate_then_the_certificates_answer_matches_the_schema(api):
    pki_services.ca_bootstrap()
    pki_services.listener_material()
    pki_services.certificate_for_kyma(kyma=KymaFactory(name="c-1"))
    document = SchemaGenerator().get_schema(request=None, public=True)
    registry = Registry().with_resource("urn:api", Resource(document, DRAFT202012))
    validator = jsonschema.Draft202012Validator(
        {"$ref": "urn:api#/components/schemas/Certificate"}, registry=registry
    )

    listing = api.get("/api/v1/certificates/").json()

    assert {c["purpose"] for c in listing["results"]} == {"listener", "runtime"}
    for certificate in listing["results"]:
        validator.validate(certificate)
        validator.validate(api.get(f"/api/v1/certificates/{certificate['uid']}/").json())
