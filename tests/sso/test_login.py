"""Single sign-on through the real provider: the authorization code flow with PKCE, users and
groups from the provider, rights from role bindings, and what ends them."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
import requests
from django.contrib.auth import get_user_model

from access.models import FleetRoleBinding, Identity
from kernel.models import AuditEntry
from tests.factories import KymaFactory
from tests.sso.provider import Hydra, sign_in

pytestmark = [pytest.mark.django_db(transaction=True)]

EU = {"kyma-project.io/region": "eu-west-1"}
US = {"kyma-project.io/region": "us-east-1"}


def bind(name: str, role: str, groups: list[str], selector: dict | None = None) -> FleetRoleBinding:
    return FleetRoleBinding.objects.create(name=name, role=role, groups=groups, selector=selector or {})


def test_the_provider_is_the_pinned_hydra(provider: Hydra):
    assert provider.version() == "v2.3.0"


def test_a_person_signs_in_through_the_provider_with_pkce(provider: Hydra, web):
    provider.directory.add("alice", "alice-pw-1", groups=["sre"])
    bind("sre-admins", "fleet-admin", ["sre"])
    session = requests.Session()

    start = session.get(f"{web.url}/oidc/authenticate/", allow_redirects=False, timeout=30)
    asked = parse_qs(urlparse(start.headers["Location"]).query)
    assert start.headers["Location"].startswith(provider.issuer + "oauth2/auth")
    assert asked["code_challenge_method"] == ["S256"] and len(asked["code_challenge"][0]) >= 43
    assert asked["response_type"] == ["code"] and "nonce" in asked

    landed = sign_in(session, web.url, "alice", "alice-pw-1")
    assert landed.status_code == 200 and landed.url == f"{web.url}/admin/", landed.url
    assert "alice" in landed.text and "Log out" in landed.text
    user = get_user_model().objects.get(username="alice")
    identity = Identity.objects.get(user=user)
    assert (identity.origin, identity.groups, identity.subject) == ("oidc", ["sre"], "alice")
    assert user.is_staff and not user.is_superuser and not user.has_usable_password()
    assert provider.directory.logins == ["alice"]
    login = AuditEntry.objects.get(action="login", name="alice")
    assert login.changes[0]["after"] == "single sign-on"


def test_the_provider_refuses_a_code_flow_without_pkce(provider: Hydra, web):
    """PKCE is enforced at the provider: a code flow without a code challenge comes back to the
    control plane as an error, so the login above worked because the control plane sent one."""
    provider.directory.add("erin", "erin-pw-1")
    session = requests.Session()
    form = session.get(
        f"{provider.issuer}oauth2/auth",
        params={
            "response_type": "code",
            "client_id": web.client_id,
            "redirect_uri": f"{web.url}/oidc/callback/",
            "scope": "openid",
            "state": "s" * 32,
            "nonce": "n" * 32,
        },
        timeout=30,
    )
    challenge = parse_qs(urlparse(form.url).query)["login_challenge"][0]
    answer = session.post(
        form.url.partition("?")[0],
        data={"challenge": challenge, "username": "erin", "password": "erin-pw-1"},
        timeout=30,
    )
    back = [
        r.headers.get("Location", "")
        for r in answer.history
        if "/oidc/callback/" in r.headers.get("Location", "")
    ]
    assert back and "error=invalid_request" in back[-1], [r.headers.get("Location") for r in answer.history]
    assert "code_challenge" in requests.utils.unquote(back[-1]).lower()
    assert answer.url.startswith(f"{web.url}/admin/login/") and "Single sign-on failed" in answer.text
    assert not get_user_model().objects.filter(username="erin").exists()


def test_a_group_removed_at_the_provider_loses_its_rights_at_the_next_login(provider: Hydra, web):
    provider.directory.add("bob", "bob-pw-1", groups=["eu-operators"])
    bind("eu-operators", "operator", ["eu-operators"], {"matchLabels": EU})
    eu = KymaFactory(name="eu-1", labels=EU)
    KymaFactory(name="us-1", labels=US)
    first = requests.Session()
    sign_in(first, web.url, "bob", "bob-pw-1")
    kymas = first.get(f"{web.url}/admin/controlplane/kyma/", timeout=30)
    assert kymas.status_code == 200 and "eu-1" in kymas.text and "us-1" not in kymas.text
    assert first.get(f"{web.url}/admin/controlplane/kyma/{eu.pk}/change/", timeout=30).status_code == 200

    provider.directory.people["bob"].groups = []  # the provider's administrator removes the group
    second = requests.Session()
    landed = sign_in(second, web.url, "bob", "bob-pw-1")
    assert get_user_model().objects.get(username="bob").is_staff is False
    assert Identity.objects.get(user__username="bob").groups == []
    assert "/admin/login/" in landed.url  # no staff access: the admin asks for another account
    refused = second.get(
        f"{web.url}/admin/controlplane/kyma/{eu.pk}/change/", allow_redirects=False, timeout=10
    )
    assert refused.status_code == 302 and "/admin/login/" in refused.headers["Location"]
    groups = AuditEntry.objects.filter(action="groups", name="bob").latest("at")
    assert groups.changes == [{"field": "groups", "before": ["eu-operators"], "after": []}]


def test_logout_ends_every_session_of_the_person(provider: Hydra, web):
    provider.directory.add("carol", "carol-pw-1", groups=["viewers"])
    bind("viewers", "viewer", ["viewers"])
    laptop, phone = requests.Session(), requests.Session()
    sign_in(laptop, web.url, "carol", "carol-pw-1")
    sign_in(phone, web.url, "carol", "carol-pw-1")
    assert phone.get(f"{web.url}/admin/", timeout=30).url == f"{web.url}/admin/"

    page = laptop.get(f"{web.url}/admin/", timeout=30)
    token = laptop.cookies["csrftoken"]
    out = laptop.post(
        f"{web.url}/admin/logout/",
        data={"csrfmiddlewaretoken": token},
        headers={"Referer": page.url},
        timeout=30,
    )
    assert out.status_code == 200
    assert "/admin/login/" in phone.get(f"{web.url}/admin/", timeout=30).url  # the other one too


def test_break_glass_password_login_is_loud_and_only_for_superusers(provider: Hydra, web):
    get_user_model().objects.create_superuser("root", "root@example.com", "root-password-123")
    get_user_model().objects.create_user("dave", password="dave-password-123", is_staff=True)
    for name, password, lands in (("root", "root-password-123", True), ("dave", "dave-password-123", False)):
        session = requests.Session()
        form = session.get(f"{web.url}/admin/login/", timeout=30)
        assert "Sign in with single sign-on" in form.text and "Break-glass only" in form.text
        answer = session.post(
            f"{web.url}/admin/login/?next=/admin/",
            data={
                "username": name,
                "password": password,
                "csrfmiddlewaretoken": session.cookies["csrftoken"],
            },
            timeout=30,
        )
        assert (answer.url == f"{web.url}/admin/") is lands, (name, answer.url)
    entry = AuditEntry.objects.get(action="login", name="root")
    assert entry.changes[0]["after"].startswith("BREAK-GLASS")
    assert not AuditEntry.objects.filter(action="login", name="dave").exists()


def test_a_provider_that_cannot_be_reached_is_a_message_on_the_login_page(provider: Hydra, web):
    from tests.sso.conftest import start_sso_web

    elsewhere = start_sso_web(provider, OIDC_ISSUER="http://127.0.0.1:9/")  # nothing listens there
    try:
        answer = requests.get(f"{elsewhere.url}/oidc/authenticate/", timeout=20)
        assert answer.status_code == 200 and answer.url.startswith(f"{elsewhere.url}/admin/login/")
        assert "Single sign-on failed" in answer.text
        callback = requests.get(f"{elsewhere.url}/oidc/callback/?code=x&state=y", timeout=20)
        assert callback.status_code < 500
    finally:
        elsewhere.proc.stop()
