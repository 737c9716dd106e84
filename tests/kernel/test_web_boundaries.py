"""The web role's edges: bodies too big are a 413 in JSON before anything reads them (with and
without DEBUG, and readable by an ordinary client of the real server), gunicorn's own errors are
JSON, a request Django refuses (a Host header it does not serve, too many form fields or files, a
broken multipart body) is a short 4xx naming why and never a traceback page, a pasted kubeconfig
never comes back in a page, and answers match the OpenAPI schema."""

from __future__ import annotations

import http.client
import json
import logging
import sys

import jsonschema
import pytest
import requests
from django.conf import settings
from django.contrib.sessions.exceptions import SessionInterrupted
from django.core.exceptions import SuspiciousFileOperation
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import RequestFactory
from django.urls import get_resolver, reverse
from django.views import debug as django_debug
from drf_spectacular.generators import SchemaGenerator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from fleet.models import Kyma, SyncResource
from kernel.badrequests import bad_request
from kernel.middleware import BadRequestRefusal
from kernel.models import AuditEntry
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


EVIL_HOST = "the Host header 'evil.example' names no host this server answers to"
TOO_MANY_FIELDS = "the request has more than 1,000 fields"
BROWSER = {"HTTP_ACCEPT": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
MODES = pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])


def refused(response, status: int = 400) -> str:
    """The answer's detail, after checking it is the short JSON refusal."""
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json"
    assert b"Traceback" not in response.content and len(response.content) < 500
    return json.loads(response.content)["detail"]


def refused_page(response, status: int = 400) -> str:
    """The page's text, after checking it is the short HTML refusal."""
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("text/html")
    assert b"Traceback" not in response.content and len(response.content) < 600
    return response.content.decode()


@pytest.mark.django_db
class TestRefusedRequests:
    @MODES
    @pytest.mark.parametrize(
        ("method", "path"), [("get", "/api/v1/kymas/"), ("post", "/api/v1/apply/")], ids=["kymas", "apply"]
    )
    def test_given_a_host_not_served_then_a_json_400_naming_it_and_one_log_line(
        self, api, settings, caplog, debug, method, path
    ):
        settings.DEBUG = debug

        with caplog.at_level(logging.WARNING, logger="django.security"):
            response = getattr(api, method)(path, data={}, format="json", HTTP_HOST="evil.example")

        assert refused(response) == EVIL_HOST
        [record] = [r for r in caplog.records if r.name == "django.security.DisallowedHost"]
        assert record.exc_info is None and EVIL_HOST in record.getMessage()

    def test_given_a_host_that_is_no_host_name_then_400_saying_so(self, client):
        response = client.get("/healthz", HTTP_HOST="bad host!")

        assert refused(response) == "the Host header 'bad host!' is not a valid host name"

    @MODES
    def test_given_a_browser_on_the_admin_with_a_host_not_served_then_a_short_page(
        self, client, settings, debug
    ):
        settings.DEBUG = debug

        page = refused_page(client.get("/admin/login/", HTTP_HOST="<b>evil.example</b>", **BROWSER))

        assert "Bad Request (400)" in page
        assert "&#x27;&lt;b&gt;evil.example&lt;/b&gt;&#x27;" in page  # quoted, never markup

    @MODES
    def test_given_too_many_form_fields_on_the_admin_login_then_400_naming_the_limit(
        self, client, settings, debug
    ):
        settings.DEBUG = debug
        body = "&".join(f"f{n}=1" for n in range(1500))
        form = "application/x-www-form-urlencoded"

        assert refused(client.post("/admin/login/", body, content_type=form)) == TOO_MANY_FIELDS
        assert TOO_MANY_FIELDS in refused_page(
            client.post("/admin/login/", body, content_type=form, **BROWSER)
        )

    @MODES
    def test_given_too_many_files_then_400_naming_the_limit(self, client, settings, debug):
        settings.DEBUG = debug
        files = {f"f{n}": SimpleUploadedFile(f"{n}.txt", b"x") for n in range(101)}

        response = client.post("/admin/login/", files)

        assert refused(response) == "the request has more than 100 files"

    def test_given_a_form_posted_to_the_api_then_415_and_no_write_is_tried(self, api):
        """The API reads JSON and YAML: a form is refused as a media type before it is parsed (read
        as an empty form, it was a refused write of an empty document, 400 "apiVersion: required")."""
        response = api.post("/api/v1/kymas/", {"name": "k"}, format="multipart")

        assert response.status_code == 415, response.content
        assert "multipart/form-data" in response.json()["detail"]
        [(outcome, reason)] = AuditEntry.objects.values_list("outcome", "reason")
        assert outcome == "refused" and reason.startswith("Unsupported media type"), reason

    @MODES
    def test_given_a_multipart_body_without_a_boundary_then_400(self, client, settings, debug):
        settings.DEBUG = debug

        response = client.post("/admin/login/", b"x", content_type="multipart/form-data; boundary=")

        assert refused(response).startswith("bad request: Invalid boundary in multipart")

    def test_given_a_view_that_raises_a_suspicious_operation_then_the_json_refusal(self):
        request = RequestFactory().get("/api/v1/kymas/")
        middleware = BadRequestRefusal(lambda request: None)

        response = middleware.process_exception(request, SuspiciousFileOperation("path traversal in '../x'"))

        assert refused(response) == "bad request: path traversal in '../x'"
        assert middleware.process_exception(request, ValueError("a bug")) is None  # a 500 stays a 500

    def test_given_production_then_handler400_is_the_short_refusal(self):
        handler = get_resolver().resolve_error_handler(400)

        assert handler is bad_request
        assert (
            refused(handler(RequestFactory().get("/healthz"), SessionInterrupted("gone")))
            == "bad request: gone"
        )

    def test_given_debug_and_a_refusal_raised_past_the_middleware_then_no_traceback_page(self, settings):
        settings.DEBUG = True
        request = RequestFactory().get("/admin/", **BROWSER)
        try:
            raise SessionInterrupted("The request's session was deleted before the request completed.")
        except SessionInterrupted:
            refusal = django_debug.technical_500_response(request, *sys.exc_info(), status_code=400)
        try:
            raise ValueError("a bug")
        except ValueError:
            fault = django_debug.technical_500_response(request, *sys.exc_info())

        assert "bad request: The request&#x27;s session was deleted" in refused_page(refusal)
        assert b"Traceback" in fault.content  # a real fault keeps DEBUG's page


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

    def test_given_a_host_not_allowed_then_a_json_400_not_djangos_html_page(self, web):
        response = requests.get(f"{web}/api/v1/kymas/", headers={"Host": "evil.example"}, timeout=10)

        assert response.status_code == 400
        assert response.headers["Content-Type"] == "application/json"
        assert response.json()["detail"] == EVIL_HOST

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
