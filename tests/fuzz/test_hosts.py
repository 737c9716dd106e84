"""Any Host header (and X-Forwarded-Host) on any door of the web role: the API, ``apply``, the admin,
the probes. A host the server does not answer to is a short 400 naming it (JSON, or a plain page
for a browser), with or without ``DJANGO_DEBUG``; never a 5xx, a traceback or Django's HTML page,
and an allowed host is served as before.

In-process through Django's test client (the whole middleware stack), so a failure shows its
traceback."""

from __future__ import annotations

import json

import pytest
from django.conf import settings as django_settings
from django.http.request import split_domain_port, validate_host
from django.test import Client, override_settings
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import count

ALLOWED = ["testserver", "localhost", "127.0.0.1", "[::1]", "localhost:8000"]
HOSTILE = [
    "evil.example",
    "evil.example:443",
    "localhost.evil.example",
    "",
    " ",
    "a b",
    "<script>x</script>",
    "localhost:99999999999999999999",
    "[::1",
    "x" * 300,
    "localhost\t",
    "\xe9vil.example",
    "%00",
]
# What an HTTP client can put in a header: latin-1, no line breaks.
header_values = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=255, blacklist_characters="\x7f"), max_size=80
)
REQUESTS = [
    ("get", "/api/v1/kymas/", None),
    ("post", "/api/v1/apply/", "application/json"),
    ("post", "/api/v1/kymas/", "application/yaml"),
    ("get", "/api/schema/", None),
    ("get", "/admin/login/", None),
    ("post", "/admin/login/", "application/x-www-form-urlencoded"),
    ("get", "/healthz", None),
    ("get", "/no-such-page", None),
]
TRACEBACK = b"Traceback (most recent call last)"


def served(host: str) -> bool:
    """Whether Django serves ``host`` (its own rule: case-insensitive, any port, a trailing dot)."""
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, django_settings.ALLOWED_HOSTS)


ACCEPTS = [None, "application/json", "text/html,application/xhtml+xml,*/*;q=0.8", "application/yaml", "*/*"]


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])
def test_any_host_header(admin_user, settings, debug, door):
    door("host")
    settings.DEBUG = debug
    client = Client()
    client.force_login(admin_user)

    @given(
        host=st.one_of(st.sampled_from(ALLOWED + HOSTILE), header_values),
        forwarded=st.one_of(st.none(), st.sampled_from(HOSTILE), header_values),
        use_forwarded=st.booleans(),
        request=st.sampled_from(REQUESTS),
        accept=st.sampled_from(ACCEPTS),
    )
    def run(host, forwarded, use_forwarded, request, accept):
        count("host")
        method, path, content_type = request
        headers = {"HTTP_HOST": host}
        if forwarded is not None:
            headers["HTTP_X_FORWARDED_HOST"] = forwarded
        if accept is not None:
            headers["HTTP_ACCEPT"] = accept
        if content_type is not None:
            headers.update(content_type=content_type, data="a=1" if "form" in content_type else "{}")
        with override_settings(USE_X_FORWARDED_HOST=use_forwarded):
            response = getattr(client, method)(path, **headers)

        assert response.status_code < 500, response.content[:500]
        assert TRACEBACK not in response.content
        named = forwarded if use_forwarded and forwarded is not None else host
        if not served(named):
            assert response.status_code == 400, (named, response.status_code, response.content[:300])
            assert len(response.content) < 1000
            if response["Content-Type"] == "application/json":
                assert "the Host header" in json.loads(response.content)["detail"]
            else:
                assert path.startswith(("/admin/", "/healthz", "/no-such"))
                assert (
                    response["Content-Type"].startswith("text/html")
                    and b"Bad Request (400)" in response.content
                )
        elif response.status_code == 400:  # an allowed host: what the request itself deserves
            assert b"the Host header" not in response.content

    run()
