"""What a hostile or careless client sends the listener gets a 4xx with a JSON ``detail``, never a 500:
in direct mode (mutual TLS here) and in proxy mode (X-Forwarded-Client-Cert). Field names are
matched as upstream's Go listener matches them (case-insensitively), only end-entity
certificates are identities, and the event recorder cannot be poisoned."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
from pathlib import Path
from urllib.parse import quote

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import NameOID
from django.utils import timezone

from listener.events import EventInvalid, ObjectKey, parse_event
from listener.models import WatchEventRecord
from listener.recorder import EventRecorder
from pki import selectors, services
from tests.factories import KymaFactory
from tests.support.listener import (
    Credentials,
    event_body,
    listener_for_test,
    module_listener,
    start_listener,
)
from tests.support.listener import request as http_request

PATH = "/v2/lifecycle-manager/event"
HUGE = "9" * 5000


class TestFieldNamesAsGoDecodesThem:
    """Upstream's listener unmarshals into Go structs: field names match case-insensitively
    (encoding/json), including the two non-ASCII letters Go folds to ASCII."""

    @pytest.mark.parametrize(
        "body",
        [
            (
                b'{"Watched": {"Namespace": "ns", "Name": "n"}, '
                b'"WatchedGvk": {"Group": "g", "Version": "v1", "Kind": "K"}}'
            ),
            (
                b'{"WATCHED": {"NAMESPACE": "ns", "NAME": "n"}, '
                b'"watchedgvk": {"group": "g", "VERSION": "v1", "kind": "K"}}'
            ),
            (
                '{"watched": {"namespace": "ns", "name": "n"}, '
                '"watchedGv\u212a": {"group": "g", "version": "v1", "kind": "K"}, "\u017fomething": 1}'
            ).encode(),
        ],
        ids=["capitalised", "any-case", "go-unicode-folds"],
    )
    def test_given_field_names_in_any_case_then_the_same_event(self, body):
        event = parse_event("v2", "lifecycle-manager", body)

        assert (event.watched.namespace, event.watched.name) == ("ns", "n")
        assert (event.group, event.version, event.kind) == ("g", "v1", "K")

    def test_given_an_owner_and_change_in_other_cases_then_read(self):
        body = (
            b'{"watched": {"name": "n"}, "watchedGvk": {"version": "v1", "kind": "K"}, '
            b'"Owner": {"namespace": "kcp-system", "NAME": "c-1"}, '
            b'"Change": {"Operation": "UPDATE", "UID": "u-1", "OldResourceVersion": "7"}}'
        )

        event = parse_event("v1", "lifecycle-manager", body)

        assert (event.owner.namespace, event.owner.name) == ("kcp-system", "c-1")
        assert (event.change.operation, event.change.uid, event.change.old_resource_version) == (
            "UPDATE",
            "u-1",
            "7",
        )

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            (
                b'{"watched": {"name": "a"}, "Watched": {"name": "b"}, "watchedGvk": {}}',
                "watched is given twice",
            ),
            (
                b'{"watched": {"name": "a"}, "watchedGvk": {"kind": "K", "Kind": "L", "version": "v"}}',
                "watchedGvk.kind is given twice",
            ),
        ],
    )
    def test_given_two_spellings_of_one_field_then_400_not_a_guess(self, body, message):
        with pytest.raises(EventInvalid, match=message):
            parse_event("v2", "lifecycle-manager", body)

    @pytest.mark.parametrize(
        "body",
        [
            f'{{"watched": {HUGE}, "watchedGvk": {{}}}}'.encode(),
            b'{"watched": {"name": "a\\u0000b"}, "watchedGvk": {"version": "v1", "kind": "K"}}',
            b'{"watched": {"name": "n"}, "watchedGvk": {"version": "v1", "kind": "\\ud800"}}',
            b'{"watched": {"name": "n"}, "watchedGvk": {"version": 1e999, "kind": "K"}}',
        ],
        ids=["5000-digits", "nul", "lone-surrogate", "infinite"],
    )
    def test_given_a_body_no_record_can_hold_then_event_invalid(self, body):
        with pytest.raises(EventInvalid):
            parse_event("v2", "lifecycle-manager", body)


@pytest.mark.django_db
class TestRecorderCannotBePoisoned:
    def event(self, name: str = "n", kind: str = "K"):
        """An accepted event carrying ``name`` and ``kind`` as they are (as before the listener
        refused such text, or from a watcher of another kind)."""
        event = parse_event(
            "v2",
            "lifecycle-manager",
            b'{"watched": {"name": "n"}, "watchedGvk": {"version": "v1", "kind": "K"}}',
        )
        return dataclasses.replace(event, kind=kind, watched=ObjectKey("", name))

    def test_given_text_no_database_stores_then_the_row_is_stored_sanitised(self):
        kyma = KymaFactory()
        recorder = EventRecorder()
        now = timezone.now()
        recorder.add(kyma.pk, self.event(name="a\x00b"), "queued", now)
        recorder.add(kyma.pk, self.event(kind="\ud800K"), "queued", now)
        recorder.add(kyma.pk, self.event(name="fine"), "queued", now)

        assert recorder.flush() == 3

        names = set(WatchEventRecord.objects.values_list("watched_name", "gvk_kind"))
        assert names == {("a\ufffdb", "K"), ("n", "\ufffdK"), ("fine", "K")}

    def test_given_a_row_the_database_refuses_then_it_is_logged_once_and_the_rest_written(self, caplog):
        kyma = KymaFactory()
        recorder = EventRecorder()
        now = timezone.now()
        recorder.add(kyma.pk, self.event(name="good"), "queued", now)
        recorder.add(kyma.pk, self.event(name="bad"), "queued", now)
        bad = next(key for key in recorder._groups if key[4] == "bad")
        recorder._groups[bad][0] = -1  # a count the column's CHECK refuses, on every database

        with caplog.at_level(logging.WARNING, logger="listener.recorder"):
            assert recorder.flush() == 1
            recorder.add(kyma.pk, self.event(name="later"), "queued", now)
            assert recorder.flush() == 1

        assert set(WatchEventRecord.objects.values_list("watched_name", flat=True)) == {"good", "later"}
        dropped = [r for r in caplog.records if "watch event record dropped" in r.getMessage()]
        assert len(dropped) == 1 and "bad" in dropped[0].getMessage()


def ca_true_credentials(common_name: str, san: str) -> Credentials:
    """A certificate our CA signed, but with basicConstraints CA:TRUE (not a runtime's identity)."""
    ca = services.keypair(selectors.issuing_authority())
    key = ec.generate_private_key(ec.SECP256R1())
    now = timezone.now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False)
        .sign(ca.private_key, hashes.SHA256())
    )
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    return Credentials(cert.public_bytes(Encoding.PEM), pem, selectors.ca_bundle_pem())


def ca_itself() -> Credentials:
    ca = services.keypair(selectors.issuing_authority())
    return Credentials(ca.certificate_pem, ca.private_key_pem, selectors.ca_bundle_pem())


@pytest.fixture(scope="module", params=["direct", "proxy"])
def running_listener(request, django_db_setup, django_db_blocker):
    options = {"mode": request.param}
    if request.param == "proxy":
        options["trusted_proxies"] = "127.0.0.0/8"
    started = module_listener(django_db_blocker, **options)
    yield request.param, started
    started[0].stop()


class Client:
    """Talks to the listener as a watcher in either mode (proxy: the certificate in XFCC)."""

    def __init__(self, mode: str, port: int, creds: Credentials) -> None:
        self.mode, self.port, self.creds = mode, port, creds

    def post(self, path: str, body=None, *, raw: bytes | None = None, headers: dict | None = None):
        headers = dict(headers or {})
        if self.mode == "proxy":
            headers["X-Forwarded-Client-Cert"] = f'Hash=x;Cert="{quote(self.creds.cert.decode(), safe="")}"'
            return http_request(self.port, None, path, body, raw=raw, headers=headers)
        return http_request(self.port, self.creds.context(), path, body, raw=raw, headers=headers)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
class TestRealListener:
    @pytest.fixture
    def setup(self, running_listener):
        mode, started = running_listener
        listener = listener_for_test(started)
        kyma = KymaFactory(runtime_id="rt-hostile", skr_domain="rt-hostile.kyma.example.com")
        return mode, listener, Client(mode, listener.port, Credentials.for_kyma(kyma))

    def test_given_upstream_field_names_capitalised_then_200(self, setup):
        _, _, client = setup
        body = {
            "Watched": {"Namespace": "kyma-system", "Name": "default"},
            "WatchedGvk": {"Group": "operator.kyma-project.io", "Version": "v1beta2", "Kind": "Kyma"},
        }

        status, answer = client.post(PATH, body)

        assert status == 200, answer

    @pytest.mark.parametrize("host", ["evil.example", "a b", "", "x" * 300])
    def test_given_any_host_header_then_the_event_is_taken_as_without_it(self, setup, host):
        _, _, client = setup  # the client is its certificate; nothing is built from the Host

        status, answer = client.post(PATH, event_body(), headers={"Host": host})

        assert status == 200, answer

    @pytest.mark.parametrize(
        ("path", "raw"),
        [
            (PATH, f'{{"watched": {HUGE}}}'.encode()),
            ("/watcher/heartbeat", f'{{"queueDepth": {HUGE}}}'.encode()),
            (PATH, b'{"watched": {"Name": "\\ud800"}, "watchedGvk": {"version": "v1", "kind": "K"}}'),
            (PATH, b'{"watched": {"Name": "a\\u0000"}, "watchedGvk": {"version": "v1", "kind": "K"}}'),
        ],
        ids=["event-5000-digits", "heartbeat-5000-digits", "surrogate", "nul"],
    )
    def test_given_a_body_nothing_can_hold_then_400_with_a_detail(self, setup, path, raw):
        _, _, client = setup

        status, answer = client.post(path, raw=raw)

        assert status == 400, answer
        assert isinstance(answer, dict) and answer["detail"]

    def test_given_a_request_line_over_gunicorns_limit_then_414_json(self, setup):
        _, _, client = setup

        status, answer = client.post("/v2/" + "a" * 5000 + "/event", event_body())

        assert status == 414
        assert "Request Line is too large" in answer["detail"]

    def test_given_a_body_over_16_kib_then_the_client_reads_a_413_json(self, setup):
        _, _, client = setup

        status, answer = client.post(PATH, raw=b"{" + b" " * (200 * 1024) + b"}")

        assert status == 413
        assert "greater than 16384 bytes" in answer["detail"]

    @pytest.mark.parametrize("who", ["ca-itself", "ca-true-leaf"])
    def test_given_a_ca_certificate_as_the_client_then_401(self, setup, who):
        mode, listener, _ = setup
        creds = (
            ca_itself()
            if who == "ca-itself"
            else ca_true_credentials("rt-hostile", "rt-hostile.kyma.example.com")
        )
        status, answer = Client(mode, listener.port, creds).post(PATH, event_body())

        assert status == 401, answer
        assert "must not be asserted in an EE certificate" in answer["detail"]


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_given_a_stopped_listener_then_no_private_key_stays_on_disk(tmp_path: Path):
    services.ca_bootstrap()
    services.listener_certificate()
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    listener = start_listener(TMPDIR=str(private_tmp))
    try:
        assert listener.process.proc.poll() is None  # serving: its worker loaded its key
    finally:
        listener.stop()
    left = [path for path in private_tmp.rglob("*") if path.is_file()]
    assert left == [], f"files left behind: {left}"
    assert not any(name.startswith("listener-tls-") for name in os.listdir(private_tmp))
