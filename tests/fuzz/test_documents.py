"""Documents as a careless or hostile client writes them, at the two doors that take many at once:
``POST /api/v1/apply/`` (JSON and YAML) and ``manage.py apply -f``. Kinds of the wrong type,
metadata that is not an object, missing specs, huge and infinite numbers, NUL characters, lone
surrogates, deep nesting, YAML aliases and tags: the answer is a 2xx or a 4xx with a JSON
``detail`` (a one-line ``CommandError``), never a 500 or a traceback, and a refused apply stores
nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import given
from hypothesis import strategies as st

from fleet.models import Kyma, Module, SyncResource
from tests.factories import KymaFactory, ModuleFactory
from tests.fuzz.conftest import count
from watchers.models import Watcher

HUGE = "\u0001HUGE\u0001"  # replaced by a 5,000-digit integer once serialised
INFINITE = "\u0001INF\u0001"  # replaced by 1e999
HOSTILE_TEXT = [
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "",
    " ",
    "é",
    "kcp-system",
    "c-1",
    "x" * 300,
    HUGE,
    INFINITE,
]
API_VERSIONS = [
    "operator.kyma-project.io/v1beta2",
    "controlplane.kyma-project.io/v1alpha1",
    "v1",
    "",
    "nope/v9",
]
KINDS = [
    "Kyma",
    "Watcher",
    "RuntimeWatcher",
    "Module",
    "SyncResource",
    "ModuleConfig",
    "Secret",
    "List",
    "Pod",
    "",
]

texts = st.one_of(st.text(max_size=12), st.sampled_from(HOSTILE_TEXT))
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=12,
)
names = st.one_of(st.sampled_from(["c-1", "keda", "w-1", "x"]), texts)
metadata = st.one_of(
    st.fixed_dictionaries(
        {"name": names},
        optional={
            "namespace": st.one_of(st.sampled_from(["kcp-system", "default"]), values),
            "labels": values,
            "annotations": values,
            "resourceVersion": st.one_of(st.sampled_from(["1", "2", "99"]), values),
        },
    ),
    values,
)
specs = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "channel": st.one_of(st.sampled_from(["regular", "fast"]), values),
            "modules": st.one_of(st.lists(st.fixed_dictionaries({"name": names}), max_size=2), values),
            "channels": st.one_of(st.just({"regular": "1.0"}), values),
            "resource": st.one_of(st.just({"version": "v1", "kind": "K", "plural": "ks"}), values),
            "kyma": names,
            "module": names,
            "manifests": st.one_of(st.just("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"), texts),
            "defaultCR": values,
        },
    ),
    values,
)
documents = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.one_of(st.sampled_from(API_VERSIONS), values),
        "kind": st.one_of(st.sampled_from(KINDS), values),
        "metadata": metadata,
        "spec": specs,
        "items": st.lists(values, max_size=2),
    },
)
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join(['*' + below] * 9)}]\n" for below, name in zip("abcd", "bcde", strict=True)
)
HOSTILE_YAML = [
    ALIAS_BOMB,
    "x: &x [*x]\n",
    "!!python/object/apply:os.system [echo pwned]\n",
    "spec: " + "[" * 5000 + "]" * 5000 + "\n",
    "kind: Kyma\nspec: {channel: .inf}\n",
    "kind: Kyma\nmetadata: {name: a}\nspec: {x: " + "9" * 5000 + "}\n",
    '"\\ud800": 1\n',
    'a: "\\0"\n',
    "- 1\n- 2\n",
    "--- \n...\n",
    "\t\x00garbage",
]


def serialise(docs: list, *, as_yaml: bool) -> str:
    if as_yaml:
        try:
            text = yaml.safe_dump_all(docs, allow_unicode=False)
        except (yaml.YAMLError, UnicodeError):
            text = json.dumps(docs)
    else:
        text = json.dumps(docs)
    return text.replace(json.dumps(HUGE), "9" * 5000).replace(json.dumps(INFINITE), "1e999")


def stored() -> tuple[int, ...]:
    counts = [model.objects.count() for model in (Kyma, Watcher, Module, SyncResource)]
    return (*counts, sum(Kyma.objects.values_list("resource_version", flat=True)))


@pytest.fixture
def catalog():
    KymaFactory(name="c-1")
    ModuleFactory(name="keda")


@pytest.mark.django_db
def test_apply_api_takes_any_documents(api, catalog, door):
    door("apply-api")

    @given(
        docs=st.one_of(st.lists(documents, min_size=1, max_size=3), st.lists(values, max_size=2)),
        as_yaml=st.booleans(),
        raw=st.one_of(st.none(), st.sampled_from(HOSTILE_YAML), st.text(max_size=40)),
    )
    def run(docs, as_yaml, raw):
        count("apply-api")
        text = raw if raw is not None else serialise(docs, as_yaml=as_yaml)
        content_type = "application/yaml" if as_yaml or raw is not None else "application/json"
        before = stored()
        response = api.post(
            "/api/v1/apply/", data=text.encode("utf-8", "surrogatepass"), content_type=content_type
        )
        assert response.status_code < 500, response.content[:500]
        body = json.loads(response.content)
        if response.status_code >= 400:
            assert isinstance(body["detail"], str) and body["detail"]
            assert stored() == before
        assert api.get("/api/v1/kymas/?limit=1").status_code == 200

    run()


@pytest.mark.django_db
def test_manage_py_apply_takes_any_documents(tmp_path: Path, catalog, door):
    door("manage.py apply")

    @given(
        docs=st.lists(documents, min_size=1, max_size=3),
        as_yaml=st.booleans(),
        raw=st.one_of(st.none(), st.sampled_from(HOSTILE_YAML)),
    )
    def run(docs, as_yaml, raw):
        count("manage.py apply")
        path = tmp_path / "docs.yaml"
        path.write_bytes(
            (raw if raw is not None else serialise(docs, as_yaml=as_yaml)).encode("utf-8", "surrogatepass")
        )
        before = stored()
        refusal = ""
        try:
            call_command("apply", "-f", str(path), stdout=io.StringIO(), stderr=io.StringIO())
        except CommandError as exc:  # any other exception is a traceback: the test fails with it
            refusal = str(exc).strip() or "(no message)"
        if refusal:
            assert refusal != "(no message)", "a command error says what is wrong"
            assert stored() == before

    run()
