"""Custom resources as the runtime's API server holds them to their CRD, with the CRD the control
plane installs in every runtime (``reconciler.kyma_crd``): defaults filled in, type and value
errors refused with a 422 naming each field, unknown fields pruned, a server-side apply that does
not fit the schema refused whole, and keyed module lists merged by name."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.kyma_crd import kyma_crd
from tests.kube.contract.calls import Client, fields_of, path

KCP = "kyma-control-plane"
API_VERSION = "operator.kyma-project.io/v1beta2"


@pytest.fixture(scope="session")
def kyma_served(backend) -> None:
    backend.register_crd(kyma_crd())


@pytest.fixture
def client(backend, kyma_served) -> Client:
    return Client(backend.api)


def kyma(name: str, namespace: str, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Kyma",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        **extra,
    }


def kymas(namespace: str, name: str | None = None) -> str:
    return path(API_VERSION, "kymas", namespace, name)


def test_a_sample_kyma_is_accepted_with_its_modules_defaulted_and_its_status_ignored(client, ns):
    """Upstream's sample Kyma, as a user creates it; the status is only the status subresource's."""
    sample = kyma(
        "default-kyma",
        ns,
        {"channel": "regular", "modules": [{"name": "template-operator"}]},
        status={"state": "Ready"},
    )
    sample["metadata"]["labels"] = {"operator.kyma-project.io/beta": "true"}

    created = client.create(kymas(ns), sample)

    assert created.status == 201
    assert created.body["spec"] == {
        "channel": "regular",
        "modules": [
            {"name": "template-operator", "customResourcePolicy": "CreateAndDelete", "managed": True}
        ],
    }
    assert "status" not in created.body
    assert created.body["metadata"]["generation"] == 1


def test_a_type_error_is_a_422_naming_the_field(client, ns):
    answer = client.create(kymas(ns), kyma("k", ns, {"channel": 5}))

    assert answer.status == 422
    assert answer.reason == "Invalid"
    assert answer.message == (
        'Kyma.operator.kyma-project.io "k" is invalid: spec.channel: Invalid value: "integer": '
        'spec.channel in body must be of type string: "integer"'
    )
    assert answer.body["details"] == {
        "name": "k",
        "group": "operator.kyma-project.io",
        "kind": "Kyma",
        "causes": [
            {
                "reason": "FieldValueTypeInvalid",
                "message": 'Invalid value: "integer": spec.channel in body must be of type string: "integer"',
                "field": "spec.channel",
            }
        ],
    }


def test_every_refused_field_is_a_cause_of_the_422(client, ns):
    spec = {
        "channel": "Regular!",
        "modules": [
            {"name": "keda", "customResourcePolicy": "Bad", "managed": "yes"},
            {"name": "keda"},
            {"channel": "none"},
        ],
    }

    answer = client.create(kymas(ns), kyma("k", ns, spec))

    assert answer.status == 422
    assert answer.causes == {
        ("spec.channel", "FieldValueInvalid"),
        ("spec.modules[0].customResourcePolicy", "FieldValueNotSupported"),
        ("spec.modules[0].managed", "FieldValueTypeInvalid"),
        ("spec.modules[1]", "FieldValueDuplicate"),
        ("spec.modules[2].name", "FieldValueRequired"),
        ("<nil>", "FieldValueInvalid"),
    }
    messages = {c["field"]: c["message"] for c in answer.body["details"]["causes"]}
    assert (
        messages["spec.channel"]
        == "Invalid value: \"Regular!\": spec.channel in body should match '^[a-z]+$'"
    )
    assert messages["spec.modules[0].customResourcePolicy"] == (
        'Unsupported value: "Bad": supported values: "CreateAndDelete", "Ignore"'
    )
    assert messages["spec.modules[1]"] == 'Duplicate value: {"name":"keda"}'
    assert (
        messages["<nil>"] == 'Invalid value: "": "spec.modules[2].channel" must not validate the schema (not)'
    )


def test_length_limits_and_required_fields(client, ns):
    short = client.create(kymas(ns), kyma("short", ns, {"channel": "ab"}))
    long = client.create(kymas(ns), kyma("long", ns, {"channel": "a" * 33}))
    missing = client.create(kymas(ns), kyma("missing", ns, {}))

    assert short.causes == {("spec.channel", "FieldValueInvalid")}
    assert short.body["details"]["causes"][0]["message"] == (
        'Invalid value: "ab": spec.channel in body should be at least 3 chars long'
    )
    assert long.causes == {("spec.channel", "FieldValueTooLong")}
    assert long.body["details"]["causes"][0]["message"] == "Too long: may not be more than 32 bytes"
    assert missing.causes == {("spec.channel", "FieldValueRequired")}


def test_unknown_fields_are_pruned_on_create_and_update(client, ns):
    created = client.create(kymas(ns), kyma("k", ns, {"channel": "regular", "extra": 1}, other={"a": 1}))
    patched = client.merge(kymas(ns, "k"), {"spec": {"more": True, "modules": [{"name": "a", "x": 1}]}})
    strict = client.create(
        kymas(ns), kyma("s", ns, {"channel": "regular", "extra": 1}), fieldValidation="Strict"
    )

    assert created.status == 201
    assert created.body["spec"] == {"channel": "regular"}
    assert "other" not in created.body
    assert patched.status == 200
    assert patched.body["spec"] == {
        "channel": "regular",
        "modules": [{"name": "a", "customResourcePolicy": "CreateAndDelete", "managed": True}],
    }
    assert strict.status == 400
    assert strict.message.endswith('strict decoding error: unknown field "spec.extra"')


def test_an_apply_that_does_not_fit_the_schema_is_a_500_naming_each_problem(client, ns):
    modules = [{"name": "a", "managed": "yes"}, {"name": "a"}, {"name": "b", "x": 1}]
    spec = {"channel": "regular", "modules": modules}

    answer = client.apply(kymas(ns, "k"), kyma("k", ns, spec), manager=KCP, force=True)
    # An undeclared field ends the check of its object: the fields after it are not looked at,
    # those before it are. The order is a Go map's (structured-merge-diff walks the decoded
    # object), so "extra" is reported alone or after the problems of "modules", run by run.
    unknown = client.apply(kymas(ns, "k"), kyma("k", ns, {**spec, "extra": 1}), manager=KCP, force=True)

    assert answer.status == 500
    kind = "operator.kyma-project.io/v1beta2, Kind=Kyma"
    head = f"failed to create typed patch object ({ns}/k; {kind}): "
    assert answer.message.startswith(head + "errors:\n")
    problems = {
        '.spec.modules[name="a"].managed: expected boolean, got &{yes}',
        '.spec.modules: duplicate entries for key [name="a"]',
        '.spec.modules[name="b"].x: field not declared in schema',
    }
    assert {line.strip() for line in answer.message.removeprefix(head + "errors:\n").split("\n")} == problems
    assert unknown.status == 500
    extra = ".spec.extra: field not declared in schema"
    alone, after = head + extra, head + "errors:\n"
    assert unknown.message == alone or (
        unknown.message.startswith(after)
        and {line.strip() for line in unknown.message.removeprefix(after).split("\n")} == problems | {extra}
    ), unknown.message
    assert client.get(kymas(ns, "k")).status == 404


def test_an_apply_is_defaulted_and_validated_and_owns_only_what_it_applied(client, ns):
    applied = client.apply(
        kymas(ns, "k"), kyma("k", ns, {"channel": "regular", "modules": [{"name": "keda"}]}), manager=KCP
    )
    refused = client.apply(kymas(ns, "k"), kyma("k", ns, {"channel": "none"}), manager=KCP)

    assert applied.status == 201
    assert applied.body["spec"]["modules"] == [
        {"name": "keda", "customResourcePolicy": "CreateAndDelete", "managed": True}
    ]
    assert fields_of(applied.body, KCP, "Apply") == {
        "f:spec": {"f:channel": {}, "f:modules": {'k:{"name":"keda"}': {".": {}, "f:name": {}}}}
    }
    assert refused.status == 422
    assert refused.causes == {("<nil>", "FieldValueInvalid")}


def test_a_module_a_runtime_user_added_survives_the_control_planes_forced_apply(client, ns):
    """``spec.modules`` is keyed by name: the control plane's apply owns only the entries it
    applied, so a module a user added in the runtime stays when the control plane applies a spec
    without it, and a module the control plane stops applying goes only if it alone owned it."""
    where = kymas(ns, "default")
    client.apply(
        where, kyma("default", ns, {"channel": "regular", "modules": [{"name": "keda"}]}), manager=KCP
    )
    live = client.get(where).body["spec"]["modules"]
    client.merge(where, {"spec": {"modules": [*live, {"name": "foo"}]}}, manager="kubectl-edit")

    again = client.apply(
        where,
        kyma("default", ns, {"channel": "regular", "modules": [{"name": "keda"}, {"name": "bar"}]}),
        manager=KCP,
        force=True,
    )
    without = client.apply(
        where, kyma("default", ns, {"channel": "regular", "modules": []}), manager=KCP, force=True
    )

    assert [m["name"] for m in again.body["spec"]["modules"]] == ["keda", "foo", "bar"]
    assert [m["name"] for m in without.body["spec"]["modules"]] == ["foo"]


def test_status_is_pruned_and_validated_on_the_status_subresource(client, ns):
    client.create(kymas(ns), kyma("k", ns, {"channel": "regular"}))

    written = client.merge(
        kymas(ns, "k") + "/status", {"status": {"state": "Ready", "unknown": 1}, "spec": {"channel": "fast"}}
    )
    refused = client.merge(kymas(ns, "k") + "/status", {"status": {"state": "Bogus"}})

    assert written.status == 200
    assert written.body["status"] == {"state": "Ready"}
    assert written.body["spec"] == {"channel": "regular"}
    assert refused.status == 422
    assert refused.causes == {("status.state", "FieldValueNotSupported")}
