"""The sso tier's OpenID provider: ORY Hydra built from the pinned module (provider/build.sh),
run with its state in memory, and the tests' own login and consent app in front of it.

Hydra is the certified provider (discovery, JWKS, the authorization code flow, PKCE enforced for
every client, ID tokens, userinfo); it delegates who the person is to a login app and what it
consents to to a consent app. :class:`Directory` is those apps for the tests: a table of people
(password, groups, e-mail) the tests change (a group removed at the provider), served over HTTP
and answering Hydra's admin API as any login app does.
"""

from __future__ import annotations

import html
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs, urlencode
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
import requests

from tests.support.processes import ROOT, Process, free_port

BUILD = ROOT / "tests" / "sso" / "provider" / "build.sh"


def hydra_binary() -> Path:
    """The built provider; a test fails (never skips) when it is missing."""
    found = subprocess.run([str(BUILD), "--check"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        pytest.fail(f"the sso tier needs ORY Hydra built from source: {found.stderr.strip()} (make sso)")
    return Path(found.stdout.strip().partition("=")[2])


@dataclass
class Person:
    password: str
    groups: list[str] = field(default_factory=list)
    email: str = ""


class _ThreadedServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class Directory:
    """The login and consent app: people, their passwords and groups, mutable by the tests."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.people: dict[str, Person] = {}
        self.logins: list[str] = []  # who signed in, in order (the tests check the provider was asked)
        self.port = free_port()
        self.server = make_server("127.0.0.1", self.port, self.app, _ThreadedServer, handler_class=_Quiet)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Directory:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, name: str, password: str, groups: Iterable[str] = (), email: str = "") -> None:
        self.people[name] = Person(password, list(groups), email or f"{name}@example.com")

    # --- Hydra's admin API ---------------------------------------------------------------------

    def _admin(self, method: str, path: str, challenge_name: str, challenge: str, body: Any = None) -> dict:
        answer = requests.request(
            method,
            f"{self.admin_url}/admin/oauth2/auth/requests/{path}",
            params={challenge_name: challenge},
            json=body,
            timeout=30,
        )
        answer.raise_for_status()
        return answer.json()

    # --- the app -------------------------------------------------------------------------------

    def app(self, environ: dict, start_response: Callable) -> list[bytes]:
        path, method = environ["PATH_INFO"], environ["REQUEST_METHOD"]
        query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        if method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            form = {k: v[0] for k, v in parse_qs(environ["wsgi.input"].read(length).decode()).items()}
        else:
            form = {}
        if path == "/login" and method == "GET":
            return self._page(start_response, "200 OK", self._login_form(query["login_challenge"]))
        if path == "/login" and method == "POST":
            return self._login(start_response, form)
        if path == "/consent":
            return self._consent(start_response, query["consent_challenge"])
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]

    @staticmethod
    def _page(start_response: Callable, status: str, body: str) -> list[bytes]:
        start_response(status, [("Content-Type", "text/html; charset=utf-8")])
        return [body.encode()]

    @staticmethod
    def _redirect(start_response: Callable, to: str) -> list[bytes]:
        start_response("302 Found", [("Location", to)])
        return [b""]

    @staticmethod
    def _login_form(challenge: str, error: str = "") -> str:
        return (
            f"<html><body><p id='error'>{html.escape(error)}</p><form method='post' action='/login'>"
            f"<input type='hidden' name='challenge' value='{html.escape(challenge)}'>"
            "<input name='username' id='username'><input type='password' name='password' id='password'>"
            "<button type='submit' id='submit'>Sign in</button></form></body></html>"
        )

    def _login(self, start_response: Callable, form: dict[str, str]) -> list[bytes]:
        challenge, name = form.get("challenge", ""), form.get("username", "")
        person = self.people.get(name)
        if person is None or person.password != form.get("password"):
            return self._page(
                start_response, "401 Unauthorized", self._login_form(challenge, "wrong password")
            )
        self.logins.append(name)
        accepted = self._admin(
            "PUT", "login/accept", "login_challenge", challenge, {"subject": name, "remember": False}
        )
        return self._redirect(start_response, accepted["redirect_to"])

    def _consent(self, start_response: Callable, challenge: str) -> list[bytes]:
        asked = self._admin("GET", "consent", "consent_challenge", challenge)
        name = asked["subject"]
        person = self.people.get(name) or Person("", [])
        claims = {"preferred_username": name, "email": person.email, "groups": list(person.groups)}
        accepted = self._admin(
            "PUT",
            "consent/accept",
            "consent_challenge",
            challenge,
            {
                "grant_scope": asked.get("requested_scope") or [],
                "grant_access_token_audience": asked.get("requested_access_token_audience") or [],
                "remember": False,
                "session": {"id_token": claims, "access_token": {}},
            },
        )
        return self._redirect(start_response, accepted["redirect_to"])


class Hydra:
    """ORY Hydra on its own ports, state in memory, log in ``state_dir``; PKCE enforced."""

    def __init__(self, binary: Path, state_dir: Path) -> None:
        self.binary, self.state_dir = binary, state_dir
        self.public_port, self.admin_port = free_port(), free_port()
        self.directory = Directory(self.admin_url)
        self.proc: Process | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.public_port}/"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def start(self) -> Hydra:
        self.directory.start()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.state_dir),
            "DSN": "memory",
            "SQA_OPT_OUT": "true",
            "LOG_LEVEL": "warn",
            "URLS_SELF_ISSUER": self.issuer,
            "URLS_LOGIN": f"{self.directory.url}/login",
            "URLS_CONSENT": f"{self.directory.url}/consent",
            "SECRETS_SYSTEM": "sso-tier-system-secret-0123456789",
            "SERVE_PUBLIC_HOST": "127.0.0.1",
            "SERVE_PUBLIC_PORT": str(self.public_port),
            "SERVE_ADMIN_HOST": "127.0.0.1",
            "SERVE_ADMIN_PORT": str(self.admin_port),
            "OAUTH2_PKCE_ENFORCED": "true",
            "TTL_ID_TOKEN": "5m",
        }
        self.proc = Process("hydra", [str(self.binary), "serve", "all", "--dev"], env)

        def ready() -> bool:
            try:
                return requests.get(f"{self.admin_url}/health/ready", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        try:
            self.proc.wait_for(ready, 60, "Hydra ready")
        except BaseException:
            self.stop()  # nothing left running when the start fails
            raise
        return self

    def stop(self) -> None:
        self.directory.stop()
        if self.proc is not None:
            self.proc.stop()

    def version(self) -> str:
        answer = requests.get(f"{self.admin_url}/version", timeout=5)
        answer.raise_for_status()
        return str(answer.json().get("version", ""))

    def client(self, redirect_uri: str, *, client_id: str | None = None) -> tuple[str, str]:
        """Register the control plane as a confidential client; returns (id, secret)."""
        client_id = client_id or f"controlplane-{free_port()}"
        secret = f"secret-{client_id}-0123456789abcdef"
        answer = requests.post(
            f"{self.admin_url}/admin/clients",
            json={
                "client_id": client_id,
                "client_secret": secret,
                "redirect_uris": [redirect_uri],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "scope": "openid email profile groups",
                "token_endpoint_auth_method": "client_secret_post",
            },
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
        return client_id, secret


def sign_in(
    session: requests.Session, web: str, name: str, password: str, *, next_path: str = "/admin/"
) -> requests.Response:
    """A person's single sign-on, as a browser does it: the control plane's login link, the
    provider, its login form, back to the control plane. Returns the last answer."""
    start = session.get(f"{web}/oidc/authenticate/?{urlencode({'next': next_path})}", timeout=30)
    start.raise_for_status()
    form_url = start.url  # the login app's form (the provider redirected there)
    challenge = parse_qs(form_url.partition("?")[2])["login_challenge"][0]
    return session.post(
        form_url.partition("?")[0],
        data={"challenge": challenge, "username": name, "password": password},
        timeout=30,
    )


def wait_until(check: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False
