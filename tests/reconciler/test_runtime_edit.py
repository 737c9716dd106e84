"""Editing a runtime's Kyma as its user would (``manage.py runtime_edit``), against emulated runtimes."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from pki import services as pki
from tests.factories import KymaFactory
from tests.reconciler.helpers import reconcile
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()


@pytest.fixture
def reconciled(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime, name="edited", modules=[{"name": "keda"}])
    reconcile(kyma)
    return runtime, kyma


def edit(*args: str) -> str:
    out = StringIO()
    call_command("runtime_edit", *args, stdout=out)
    return out.getvalue()


def runtime_spec(runtime) -> dict:
    return runtime.get_object("Kyma", "default", "kyma-system")["spec"]


def test_given_a_channel_when_edited_then_the_runtime_says_so_as_its_user_wrote_it(reconciled):
    runtime, kyma = reconciled
    out = edit("kcp-system/edited", "--channel", "fast")
    assert "channel=fast" in out
    assert runtime_spec(runtime)["channel"] == "fast"
    kyma.refresh_from_db()
    assert kyma.channel == "regular"  # the control plane learns it from the runtime, not from us
    reconcile(kyma)
    assert kyma.channel == "fast"


def test_given_modules_when_enabled_and_disabled_then_the_list_changes_in_the_runtime(reconciled):
    runtime, _ = reconciled
    edit("edited", "--enable", "serverless")
    assert [m["name"] for m in runtime_spec(runtime)["modules"]] == ["keda", "serverless"]
    edit("edited", "--disable", "keda")
    assert [m["name"] for m in runtime_spec(runtime)["modules"]] == ["serverless"]


def test_given_what_the_runtime_says_already_when_edited_then_nothing_is_written(reconciled):
    runtime, _ = reconciled
    before = runtime.get_object("Kyma", "default", "kyma-system")["metadata"]["resourceVersion"]
    assert "nothing changed" in edit("edited", "--channel", "regular", "--enable", "keda")
    assert runtime.get_object("Kyma", "default", "kyma-system")["metadata"]["resourceVersion"] == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing", "--channel", "fast"], 'kymas "kcp-system/missing" not found'),
        (["edited"], "nothing to change"),
        (["edited", "--channel", "none"], "'none' is reserved"),
        (["edited", "--channel", "Fast!"], "invalid channel 'Fast!'"),
        (["edited", "--enable", "keda", "--disable", "keda"], "both enabled and disabled: keda"),
    ],
)
def test_given_bad_input_when_edited_then_a_precise_error(reconciled, args, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(")) as raised:
        edit(*args)
    assert message in str(raised.value)


def test_given_no_kubeconfig_when_edited_then_it_says_the_runtime_cannot_be_reached():
    KymaFactory(name="lonely")
    with pytest.raises(CommandError, match="has no kubeconfig"):
        edit("lonely", "--channel", "fast")


def test_given_a_runtime_down_when_edited_then_the_error_names_it(reconciled, emulator_host):
    runtime, _ = reconciled
    emulator_host.run(runtime.close())
    with pytest.raises(CommandError, match="runtime of kcp-system/edited: "):
        edit("edited", "--channel", "fast")


def test_given_a_module_spec_when_edited_then_the_module_cr_in_the_runtime_changes(reconciled):
    runtime, kyma = reconciled
    out = edit("kcp-system/edited", "--module-spec", "keda", "replicas=3", "logLevel=debug")
    assert "replicas=3" in out and 'logLevel="debug"' in out
    assert runtime.get_object("Keda", "default", "kyma-system")["spec"] == {
        "replicas": 3,
        "logLevel": "debug",
    }
    assert "already says so" in edit("kcp-system/edited", "--module-spec", "keda", "replicas=3")
    reconcile(kyma)
    assert kyma.module_configs.get().spec == {"replicas": 3, "logLevel": "debug"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--module-spec", "nope", "a=1"], "unknown module 'nope'"),
        (["--module-spec", "keda", "replicas"], "expected FIELD=VALUE"),
        (["--module-spec", "keda"], "nothing to change"),
    ],
)
def test_given_a_bad_module_spec_when_edited_then_a_precise_error(reconciled, args, message):
    with pytest.raises(CommandError, match=message):
        edit("kcp-system/edited", *args)
