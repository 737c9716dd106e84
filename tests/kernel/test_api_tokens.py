"""Named API tokens: a key shown once, stored as a digest, with an expiry and a last use."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from kernel.api_tokens import api_token_create
from kernel.errors import ValidationFailed
from kernel.models import ApiToken

pytestmark = pytest.mark.django_db

KYMAS = "/api/v1/kymas/"


def get_kymas(key: str, keyword: str = "Token"):
    return APIClient().get(KYMAS, HTTP_AUTHORIZATION=f"{keyword} {key}")


class TestAuthentication:
    @pytest.mark.parametrize("keyword", ["Token", "Bearer", "bearer"])
    def test_given_new_token_when_listing_with_either_keyword_then_200(self, admin_user, keyword):
        _, key = api_token_create(user=admin_user, name="ci")
        response = get_kymas(key, keyword)
        assert response.status_code == 200, response.json()

    def test_given_expired_token_when_listing_then_401_saying_when(self, admin_user):
        expired = timezone.now().replace(microsecond=0) - dt.timedelta(days=1)
        _, key = api_token_create(user=admin_user, name="old", expires_at=expired)
        response = get_kymas(key, "Bearer")
        assert response.status_code == 401
        assert response.json()["detail"] == f"token expired on {expired.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        assert response["WWW-Authenticate"] == "Token"

    def test_given_token_expiring_later_when_listing_then_200(self, admin_user):
        _, key = api_token_create(
            user=admin_user, name="soon", expires_at=timezone.now() + dt.timedelta(hours=1)
        )
        assert get_kymas(key).status_code == 200

    def test_given_unknown_named_key_when_listing_then_401_invalid_token(self, admin_user):
        _, key = api_token_create(user=admin_user, name="ci")
        response = get_kymas(key[:-2] + "xx")
        assert response.status_code == 401 and response.json()["detail"] == "Invalid token."

    def test_given_deleted_token_when_listing_then_401(self, admin_user):
        token, key = api_token_create(user=admin_user, name="ci")
        token.delete()
        assert get_kymas(key).status_code == 401

    def test_given_drf_token_when_listing_with_either_keyword_then_still_200(self, admin_user):
        key = Token.objects.create(user=admin_user).key
        assert get_kymas(key, "Token").status_code == 200
        assert get_kymas(key, "Bearer").status_code == 200

    def test_given_token_of_user_without_rights_when_listing_then_403(self, django_user_model):
        user = django_user_model.objects.create_user("nobody", password="x-password-123")
        _, key = api_token_create(user=user, name="ci")
        assert get_kymas(key).status_code == 403


class TestStorage:
    def test_given_new_token_then_only_digest_and_prefix_stored(self, admin_user):
        token, key = api_token_create(user=admin_user, name="ci")
        stored = ApiToken.objects.values().get(pk=token.pk)
        assert stored["digest"] == hashlib.sha256(key.encode()).hexdigest()
        assert key.startswith(stored["prefix"]) and len(stored["prefix"]) < len(key) // 2
        assert all(key not in str(value) for value in stored.values())

    def test_given_token_when_used_then_last_used_at_moves(self, admin_user):
        token, key = api_token_create(user=admin_user, name="ci")
        assert token.last_used_at is None
        get_kymas(key)
        token.refresh_from_db()
        first = token.last_used_at
        assert first is not None
        long_ago = timezone.now() - dt.timedelta(days=3)
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=long_ago)
        get_kymas(key, "Bearer")
        token.refresh_from_db()
        assert token.last_used_at > long_ago and token.last_used_at >= first

    def test_given_name_taken_by_same_user_when_creating_then_refused(self, admin_user, django_user_model):
        api_token_create(user=admin_user, name="ci")
        with pytest.raises(ValidationFailed, match="already has a token with this name"):
            api_token_create(user=admin_user, name="ci")
        other = django_user_model.objects.create_user("other", password="x-password-123")
        api_token_create(user=other, name="ci")  # another user may use the same name

    def test_given_empty_name_when_creating_then_refused(self, admin_user):
        with pytest.raises(ValidationFailed):
            api_token_create(user=admin_user, name="")


class TestAdmin:
    @pytest.fixture
    def browser(self, client, admin_user):
        client.force_login(admin_user)
        return client

    def test_given_tokens_when_listing_then_names_and_prefixes_but_never_keys(self, browser, admin_user):
        token, key = api_token_create(user=admin_user, name="ci-deploy")
        drf_key = Token.objects.create(user=admin_user).key
        html = browser.get("/admin/kernel/apitoken/").content.decode()
        assert "ci-deploy" in html and token.prefix in html
        assert key not in html and drf_key not in html

    def test_given_token_when_opening_its_page_then_key_absent(self, browser, admin_user):
        token, key = api_token_create(user=admin_user, name="ci-deploy")
        response = browser.get(f"/admin/kernel/apitoken/{token.pk}/change/")
        assert response.status_code == 200
        html = response.content.decode()
        assert token.prefix in html and key not in html and token.digest not in html

    def test_given_drf_tokens_then_their_admin_is_gone(self, browser, admin_user):
        Token.objects.create(user=admin_user)
        assert browser.get("/admin/authtoken/tokenproxy/").status_code == 404
        assert "tokenproxy" not in browser.get("/admin/").content.decode()

    def test_given_add_form_when_saved_then_key_shown_once_and_works(self, browser, admin_user):
        response = browser.post(
            "/admin/kernel/apitoken/add/",
            {"user": admin_user.pk, "name": "ci", "expires_at_0": "", "expires_at_1": ""},
            follow=True,
        )
        assert response.status_code == 200
        token = ApiToken.objects.get(name="ci")
        html = response.content.decode()
        shown = html.split("<code>", 1)[1].split("</code>", 1)[0]
        assert shown.startswith(token.prefix) and get_kymas(shown).status_code == 200
        again = browser.get("/admin/kernel/apitoken/").content.decode()
        again += browser.get(f"/admin/kernel/apitoken/{token.pk}/change/").content.decode()
        assert shown not in again

    def test_given_name_taken_when_adding_then_form_error_not_500(self, browser, admin_user):
        api_token_create(user=admin_user, name="ci")
        response = browser.post("/admin/kernel/apitoken/add/", {"user": admin_user.pk, "name": "ci"})
        assert response.status_code == 200
        assert "already has a token with this name" in response.content.decode()
        assert ApiToken.objects.count() == 1


class TestCommand:
    def run(self, *args: str) -> tuple[str, str]:
        out, err = io.StringIO(), io.StringIO()
        call_command("token", *args, stdout=out, stderr=err)
        return out.getvalue().strip(), err.getvalue()

    def test_given_user_when_creating_then_key_printed_once_and_works(self, admin_user):
        key, note = self.run("create", "root", "ci", "--expires-in-days", "3")
        token = ApiToken.objects.get(name="ci")
        assert key.startswith(token.prefix) and "shown only this once" in note
        assert token.expires_at - timezone.now() > dt.timedelta(days=2, hours=23)
        assert get_kymas(key, "Bearer").status_code == 200

    def test_given_no_expiry_when_creating_then_never_expires(self, admin_user):
        self.run("create", "root", "ci")
        assert ApiToken.objects.get(name="ci").expires_at is None

    def test_given_unknown_user_when_creating_then_error(self, db):
        with pytest.raises(CommandError, match="no user 'ghost'"):
            self.run("create", "ghost", "ci")

    def test_given_name_taken_when_creating_then_error(self, admin_user):
        self.run("create", "root", "ci")
        with pytest.raises(CommandError, match="already has a token with this name"):
            self.run("create", "root", "ci")

    @pytest.mark.parametrize("days", ["0", "-3", "36501", "99999999", "9" * 5000, "abc", "1.5"])
    def test_given_days_out_of_range_when_creating_then_one_line_error_naming_the_range(
        self, admin_user, days
    ):
        with pytest.raises(CommandError) as refused:
            self.run("create", "root", "ci", "--expires-in-days", days)

        message = str(refused.value)
        assert "\n" not in message and len(message) < 250
        assert "is not a whole number of days at least 1 and at most 36,500 (100 years)" in message
        assert not ApiToken.objects.exists()

    def test_given_a_century_when_creating_then_it_expires_then(self, admin_user):
        self.run("create", "root", "ci", "--expires-in-days", "36500")

        assert ApiToken.objects.get(name="ci").expires_at.year >= timezone.now().year + 99

    def test_given_the_command_line_then_an_overflowing_expiry_is_argparse_error_not_a_traceback(self):
        command = ["token", "create", "root", "ci", "--expires-in-days", "99999999"]
        result = subprocess.run(
            [sys.executable, str(settings.BASE_DIR / "manage.py"), *command],
            capture_output=True,
            text=True,
            timeout=60,
        )

        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines()[-1] == (
            "manage.py token create: error: argument --expires-in-days: '99999999' is not a whole number "
            "of days at least 1 and at most 36,500 (100 years); leave the option out for no expiry"
        )
