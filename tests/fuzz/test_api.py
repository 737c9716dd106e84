"""Every operation of ``/api/schema/`` fuzzed by schemathesis, with and without authentication
(a superuser's token, a read-only user's, a module credential, none), with valid and invalid
data, in JSON and (where an operation takes it) YAML, asking for JSON or YAML answers.

In-process through the web role's WSGI application (its middleware, DRF, the services and the
test database), so one case costs milliseconds and a failure shows its traceback."""

from __future__ import annotations

import pytest
import schemathesis
import yaml
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance
from werkzeug.test import Client

from controlplane.wsgi import application
from fleet.models import Job, Kyma, Module, ModuleConfig, ModuleCredential, SyncResource
from fleet.services.credentials import module_credential_create
from kernel.models import ApiToken, AuditEntry
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory, WatcherFactory
from tests.fuzz.conftest import count
from watchers.models import Watcher

SCHEMA = schemathesis.openapi.from_wsgi("/api/schema/", application)
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
STORED = (Kyma, Watcher, Module, SyncResource, ModuleConfig, ModuleCredential, ApiToken, Job)
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def stored_state() -> tuple:
    """What a refused request must leave as it was: rows, and every object's version."""
    rows = tuple(model.objects.count() for model in STORED)
    versions = tuple(
        sum(model.objects.values_list("resource_version", flat=True))
        for model in (Kyma, Watcher, Module, SyncResource)
    )
    return rows, versions


@pytest.fixture
def in_process():
    """Django's request signals close the database connection after each request; the test
    client disconnects them for the test's transaction, and so does this."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield Client(application)
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def credentials(admin_user, django_user_model):
    from django.contrib.auth.models import Permission

    kyma = KymaFactory(name="c-1", skr_domain="c-1.example.com")
    module = ModuleFactory(name="keda")
    ModuleConfig.objects.create(kyma=kyma, module=module, namespace=kyma.namespace, name="c-1-keda")
    SyncResourceFactory(kyma=kyma, module=module, name="c-1-keda")
    WatcherFactory()
    viewer = django_user_model.objects.create_user("viewer", password="x-123456789")
    viewer.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))
    _, module_key = module_credential_create(module=module, name="keda-manager")
    # The audit trail holds entries of every shape its answers must describe: a write with a diff
    # (values of any JSON type), a refusal with a reason, an entry of a Kyma and one of none.
    AuditEntry.objects.create(
        actor="root",
        action="update",
        kind="Kyma",
        namespace="kcp-system",
        name="c-1",
        kyma_id=kyma.pk,
        changes=[
            {"field": "channel", "before": "regular", "after": "fast"},
            {"field": "modules", "before": [], "after": [{"name": "keda"}]},
            {"field": "labels", "before": None, "after": {"a": "b"}},
            {"field": "skip_maintenance_windows", "before": False, "after": True},
        ],
    )
    AuditEntry.objects.create(
        actor="anonymous", action="create", outcome="refused", reason="no key", via="api"
    )
    return {
        "superuser": {"Authorization": f"Token {Token.objects.create(user=admin_user).key}"},
        "viewer": {"Authorization": f"Token {Token.objects.create(user=viewer).key}"},
        "module": {"Authorization": f"Bearer {module_key}"},
        "none": {},
        "broken": {"Authorization": "Token kcp_not-a-key"},
    }


def cases(operation) -> st.SearchStrategy:
    modes = [operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)]
    for media_type in operation.get_request_payload_content_types():
        if "yaml" in media_type:
            modes.append(operation.as_strategy(GenerationMode.NEGATIVE, media_type=media_type))
    return st.one_of(modes)


def no_traceback(response) -> None:
    text = response.text if hasattr(response, "text") else ""
    assert "Traceback (most recent call last)" not in text
    assert "<title>Server Error" not in text


@pytest.mark.django_db
@pytest.mark.parametrize("operation", OPERATIONS, ids=[f"{op.method.upper()} {op.path}" for op in OPERATIONS])
def test_every_api_operation(operation, credentials, in_process, door):
    door("api")

    @settings(max_examples=max(3, settings.default.max_examples // 2))  # 40 operations
    @given(
        case=cases(operation),
        who=st.sampled_from(sorted(credentials)),
        answer=st.sampled_from(["application/json", "application/yaml"]),
    )
    def run(case, who, answer):
        count("api")
        before = stored_state() if case.method.upper() in WRITES else None
        response = case.call(headers={**credentials[who], "Accept": answer})
        no_traceback(response)
        if answer == "application/json":
            case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
        else:
            assert response.status_code < 500, response.text[:500]
            if response.text and response.headers.get("Content-Type", "").startswith("application/yaml"):
                yaml.safe_load(response.text)
        if 400 <= response.status_code < 500 and case.method.upper() in WRITES:
            assert stored_state() == before, (
                f"{case.method} {case.path} stored something and answered {response.status_code}"
            )
        # The server still answers, and the database with it.
        assert in_process.get("/healthz").status_code == 200
        assert in_process.get("/api/v1/kymas/?limit=1", headers=credentials["superuser"]).status_code == 200

    run()


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/audit/", "/api/v1/audit/{id}/"])
def test_audit_answers_match_their_schema_with_every_kind_of_value(path, credentials, in_process, door):
    """Not left to chance: the trail's answers, with changes whose values are null, lists,
    objects and booleans, match the documented schema (schemathesis' response check)."""
    door("api")
    count("api")
    entry = AuditEntry.objects.filter(kind="Kyma").first()
    operation = SCHEMA[path]["GET"]
    case = operation.Case(path_parameters={"id": entry.pk} if "{id}" in path else {})
    response = case.call(headers=credentials["superuser"])
    assert response.status_code == 200
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])
