"""manage.py apply/get/ensureadmin/reencrypt, as a user at a terminal would run them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from fleet.models import Kyma
from kernel.sealing import cipher
from tests.console.test_api import KUBECONFIG
from tests.factories import KymaFactory
from tests.fleet.test_documents import UPSTREAM_KYMA, UPSTREAM_WATCHER

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(UPSTREAM_WATCHER + "---\n" + UPSTREAM_KYMA)
    return path


def test_given_file_when_applied_twice_then_created_then_unchanged(manifest):
    assert run("apply", "-f", str(manifest)).splitlines() == [
        "watcher.operator.kyma-project.io/klm-watcher created",
        "kyma.operator.kyma-project.io/3d1f0b6c-runtime created",
    ]
    assert "unchanged" in run("apply", "-f", str(manifest))


def test_given_directory_when_applied_then_every_yaml_file_is_read(manifest, tmp_path):
    (tmp_path / "notes.txt").write_text("ignored")
    assert len(run("apply", "-f", str(tmp_path)).splitlines()) == 2


def test_given_bad_document_when_applied_then_command_fails_with_paths_and_applies_nothing(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(UPSTREAM_WATCHER + "---\n" + UPSTREAM_KYMA.replace("channel: regular", "channel: x"))
    with pytest.raises(CommandError) as failure:
        run("apply", "-f", str(path))
    message = str(failure.value)
    assert "document 2 (Kyma kcp-system/3d1f0b6c-runtime):" in message
    assert "spec.channel:" in message
    assert not Kyma.objects.exists()


def test_given_missing_file_when_applied_then_clear_error():
    with pytest.raises(CommandError, match="no such file"):
        run("apply", "-f", "/nonexistent.yaml")


def test_given_kymas_when_get_then_table_yaml_and_json(manifest):
    run("apply", "-f", str(manifest))
    table = run("get", "kymas")
    assert table.splitlines()[0].split() == ["NAMESPACE", "NAME", "STATE", "CHANNEL", "RUNTIME-ID", "AGE"]
    single = yaml.safe_load(run("get", "kyma", "kcp-system/3d1f0b6c-runtime", "-o", "yaml"))
    assert single["kind"] == "Kyma" and single["spec"]["modules"][1]["name"] == "btp-operator"
    listing = yaml.safe_load(run("get", "watchers", "-o", "json"))
    assert listing["kind"] == "List" and listing["items"][0]["kind"] == "Watcher"


def test_given_unknown_kind_or_name_when_get_then_clear_errors():
    with pytest.raises(CommandError, match="unknown resource type 'pods'"):
        run("get", "pods")
    with pytest.raises(CommandError, match='kymas "kcp-system/nope" not found'):
        run("get", "kymas", "kcp-system/nope")


def test_given_no_admin_when_ensureadmin_then_created_once(monkeypatch, settings):
    settings.DEBUG = True  # make run: a generated password, printed in a box
    monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "boss")
    monkeypatch.delenv("DJANGO_SUPERUSER_PASSWORD", raising=False)
    first = run("ensureadmin")
    assert "Created administrator 'boss'" in first and "password: " in first
    password = first.split("password: ")[1].split()[0]
    assert get_user_model().objects.get(username="boss").check_password(password)
    assert "exists" in run("ensureadmin")


def test_in_production_ensureadmin_takes_the_password_from_the_environment_and_never_prints_it(
    monkeypatch, settings
):
    settings.DEBUG = False
    monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "boss")
    monkeypatch.delenv("DJANGO_SUPERUSER_PASSWORD", raising=False)
    with pytest.raises(CommandError, match="DJANGO_SUPERUSER_PASSWORD is not set"):
        run("ensureadmin")
    assert not get_user_model().objects.exists()

    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "from-a-secret-4711")
    output = run("ensureadmin")
    assert "from-a-secret-4711" not in output
    assert get_user_model().objects.get(username="boss").check_password("from-a-secret-4711")
    monkeypatch.delenv("DJANGO_SUPERUSER_PASSWORD")
    assert "exists" in run("ensureadmin")  # upgrades: nothing to do, no password needed


def test_given_new_primary_key_when_reencrypting_then_old_key_can_be_dropped(settings):
    kyma = KymaFactory()
    kyma.kubeconfig = KUBECONFIG
    kyma.save()
    old_key = settings.ENCRYPTION_KEYS[0]
    new_key = Fernet.generate_key().decode()
    with override_settings(ENCRYPTION_KEYS=[new_key, old_key]):
        output = run("reencrypt")
        assert "controlplane.Kyma: 1 row(s) re-encrypted" in output
    with override_settings(ENCRYPTION_KEYS=[new_key]):
        assert Kyma.objects.get(pk=kyma.pk).kubeconfig.reveal() == KUBECONFIG
    assert cipher()  # the cache follows the settings back


def test_given_a_secret_no_key_opens_when_reencrypting_then_one_line_names_the_row_and_nothing_changes(
    settings,
):
    kyma = KymaFactory()
    kyma.kubeconfig = KUBECONFIG
    kyma.save()
    before = Kyma.objects.filter(pk=kyma.pk).values_list("kubeconfig", flat=True).get()
    stranger = Fernet.generate_key().decode()

    with override_settings(ENCRYPTION_KEYS=[stranger]), pytest.raises(CommandError) as refused:
        run("reencrypt")

    assert str(refused.value).startswith(f"controlplane.Kyma {kyma.pk}: ")
    assert Kyma.objects.filter(pk=kyma.pk).values_list("kubeconfig", flat=True).get() == before
