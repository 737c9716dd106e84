"""Who did what to people's access: API tokens edited or deleted in the admin, users and groups
added, changed (groups, permissions, password) or deleted, the administrator ``manage.py
ensureadmin`` makes. Each write is an audit entry with its actor and what changed, shown on the
object's History; a password or its hash never appears, nor a key."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.urls import reverse

from kernel.api_tokens import api_token_create
from kernel.models import ApiToken, AuditEntry

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "correct-horse-battery-staple-42"


def everything_recorded() -> str:
    return json.dumps(list(AuditEntry.objects.values()), default=str)


def secrets_of(*users: User) -> list[str]:
    """What must never be in the trail: each user's password hash and its salt and digest parts."""
    hashes = [User.objects.get(pk=user.pk).password for user in users]
    return [*hashes, *(part for h in hashes for part in h.split("$")[2:])]


@pytest.fixture
def token(admin_user):
    token, key = api_token_create(user=admin_user, name="ci-deploy")
    return token, key


class TestApiTokensInTheAdmin:
    def test_given_an_expiry_set_in_the_admin_then_recorded_with_the_admin_as_actor(
        self, admin_client, token
    ):
        token, key = token
        url = reverse("admin:kernel_apitoken_change", args=[token.pk])

        response = admin_client.post(
            url, {"name": "ci-deploy", "expires_at_0": "2031-01-02", "expires_at_1": "03:04:05"}
        )

        assert response.status_code == 302
        entry = AuditEntry.objects.get(kind="ApiToken", action="update")
        assert (entry.actor, entry.via, entry.namespace, entry.name) == ("root", "admin", "root", "ci-deploy")
        assert [c["field"] for c in entry.changes] == ["expires_at"]
        assert entry.changes[0]["before"] is None and entry.changes[0]["after"].startswith("2031-01-02")
        assert key not in everything_recorded()

    def test_given_a_token_deleted_in_the_admin_then_recorded_and_its_history_shows_it(
        self, admin_client, token
    ):
        token, key = token

        response = admin_client.post(
            reverse("admin:kernel_apitoken_delete", args=[token.pk]), {"post": "yes"}
        )

        assert response.status_code == 302 and not ApiToken.objects.exists()
        entry = AuditEntry.objects.get(kind="ApiToken", action="delete")
        assert (entry.actor, entry.via, entry.name) == ("root", "admin", "ci-deploy")
        assert {"field": "prefix", "before": f"{token.prefix}…", "after": None} in entry.changes
        assert key not in everything_recorded() and token.digest not in everything_recorded()

    def test_given_tokens_deleted_by_the_list_action_then_each_recorded(self, admin_client, admin_user):
        tokens = [api_token_create(user=admin_user, name=name)[0] for name in ("a", "b")]

        admin_client.post(
            reverse("admin:kernel_apitoken_changelist"),
            {"action": "delete_selected", "_selected_action": [t.pk for t in tokens], "post": "yes"},
        )

        assert sorted(AuditEntry.objects.filter(action="delete").values_list("name", flat=True)) == ["a", "b"]

    def test_given_a_token_made_edited_and_revoked_then_its_history_page_lists_each(
        self, admin_client, token
    ):
        token, _ = token
        admin_client.post(
            reverse("admin:kernel_apitoken_change", args=[token.pk]),
            {"name": "ci-deploy-2", "expires_at_0": "", "expires_at_1": ""},
        )

        history = admin_client.get(reverse("admin:kernel_apitoken_history", args=[token.pk])).content.decode()

        assert "name: ci-deploy → ci-deploy-2" in history


class TestUsersAndGroupsInTheAdmin:
    def test_given_a_user_added_in_the_admin_then_recorded_without_the_password(
        self, admin_client, admin_user
    ):
        response = admin_client.post(
            reverse("admin:auth_user_add"),
            {
                "username": "alice",
                "usable_password": "true",
                "password1": NEW_PASSWORD,
                "password2": NEW_PASSWORD,
            },
        )

        assert response.status_code == 302, response.content.decode()[:2000]
        entry = AuditEntry.objects.get(kind="User", action="create")
        assert (entry.actor, entry.via, entry.name) == ("root", "admin", "alice")
        assert {"field": "password", "before": None, "after": "<set, redacted>"} in entry.changes
        recorded = everything_recorded()
        assert NEW_PASSWORD not in recorded
        assert not any(secret in recorded for secret in secrets_of(User.objects.get(username="alice")))

    def test_given_groups_and_permissions_changed_then_the_diff_names_them(self, admin_client, admin_user):
        alice = User.objects.create_user("alice", password=NEW_PASSWORD)
        operators = Group.objects.create(name="operators")
        change_kyma = Permission.objects.get(content_type__app_label="controlplane", codename="change_kyma")
        form = {
            "username": "alice",
            "is_active": "on",
            "is_staff": "on",
            "groups": [operators.pk],
            "user_permissions": [change_kyma.pk],
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        }

        response = admin_client.post(reverse("admin:auth_user_change", args=[alice.pk]), form)

        assert response.status_code == 302, response.content.decode()[:2000]
        entry = AuditEntry.objects.get(kind="User", action="update")
        assert entry.actor == "root" and entry.name == "alice"
        assert {"field": "is_staff", "before": False, "after": True} in entry.changes
        assert {"field": "groups", "before": [], "after": ["operators"]} in entry.changes
        assert {
            "field": "user_permissions",
            "before": [],
            "after": ["controlplane.change_kyma"],
        } in entry.changes
        assert "password" not in {c["field"] for c in entry.changes}  # not changed, not said
        history = admin_client.get(reverse("admin:auth_user_history", args=[alice.pk])).content.decode()
        assert "operators" in history

    def test_given_a_password_changed_in_the_admin_then_recorded_as_changed_never_the_hash(
        self, admin_client, admin_user
    ):
        alice = User.objects.create_user("alice", password="old-password-123456")
        old_hash = User.objects.get(pk=alice.pk).password

        response = admin_client.post(
            reverse("admin:auth_user_password_change", args=[alice.pk]),
            {"usable_password": "true", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
        )

        assert response.status_code == 302, response.content.decode()[:2000]
        entry = AuditEntry.objects.get(kind="User", action="update")
        assert (entry.actor, entry.via, entry.name) == ("root", "admin", "alice")
        assert entry.changes == [
            {"field": "password", "before": "<set, redacted>", "after": "<changed, redacted>"}
        ]
        recorded = everything_recorded()
        assert NEW_PASSWORD not in recorded and old_hash not in recorded
        assert not any(secret in recorded for secret in secrets_of(alice))

    def test_given_password_login_disabled_in_the_admin_then_recorded_as_disabled(
        self, admin_client, admin_user
    ):
        alice = User.objects.create_user("alice", password="old-password-123456")

        response = admin_client.post(
            reverse("admin:auth_user_password_change", args=[alice.pk]),
            {"usable_password": "false", "unset-password": "1"},
        )

        assert response.status_code == 302, response.content.decode()[:2000]
        assert not User.objects.get(pk=alice.pk).has_usable_password()
        entry = AuditEntry.objects.get(kind="User", action="update")
        assert entry.changes == [{"field": "password", "before": "<set, redacted>", "after": "<disabled>"}]
        assert not any(secret in everything_recorded() for secret in secrets_of(alice))

    def test_given_a_group_added_changed_and_deleted_then_each_recorded(self, admin_client, admin_user):
        view_kyma = Permission.objects.get(content_type__app_label="controlplane", codename="view_kyma")
        change_kyma = Permission.objects.get(content_type__app_label="controlplane", codename="change_kyma")

        admin_client.post(
            reverse("admin:auth_group_add"), {"name": "operators", "permissions": [view_kyma.pk]}
        )
        group = Group.objects.get(name="operators")
        admin_client.post(
            reverse("admin:auth_group_change", args=[group.pk]),
            {"name": "operators", "permissions": [view_kyma.pk, change_kyma.pk]},
        )
        admin_client.post(reverse("admin:auth_group_delete", args=[group.pk]), {"post": "yes"})

        entries = list(AuditEntry.objects.filter(kind="Group").order_by("id"))
        assert [(e.action, e.name, e.actor) for e in entries] == [
            ("create", "operators", "root"),
            ("update", "operators", "root"),
            ("delete", "operators", "root"),
        ]
        assert {"field": "permissions", "before": None, "after": ["controlplane.view_kyma"]} in entries[
            0
        ].changes
        assert entries[1].changes == [
            {
                "field": "permissions",
                "before": ["controlplane.view_kyma"],
                "after": ["controlplane.change_kyma", "controlplane.view_kyma"],
            }
        ]

    def test_given_a_user_deleted_in_the_admin_then_recorded(self, admin_client, admin_user):
        alice = User.objects.create_user("alice", password=NEW_PASSWORD)

        admin_client.post(reverse("admin:auth_user_delete", args=[alice.pk]), {"post": "yes"})

        entry = AuditEntry.objects.get(kind="User", action="delete")
        assert (entry.actor, entry.via, entry.name) == ("root", "admin", "alice")


class TestEnsureAdminCommand:
    def test_given_no_administrator_then_the_one_made_is_recorded_as_the_commands(self, monkeypatch):
        monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "admin")
        monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", NEW_PASSWORD)

        call_command("ensureadmin", stdout=io.StringIO())

        entry = AuditEntry.objects.get(kind="User")
        assert (entry.action, entry.name, entry.via, entry.request) == (
            "create",
            "admin",
            "command",
            "manage.py ensureadmin",
        )
        assert {"field": "is_superuser", "before": None, "after": True} in entry.changes
        recorded = everything_recorded()
        assert NEW_PASSWORD not in recorded
        assert not any(secret in recorded for secret in secrets_of(User.objects.get(username="admin")))
