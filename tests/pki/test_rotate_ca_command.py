"""``manage.py pki rotate-ca`` run by a script (no terminal): it never hangs or crashes on the
confirmation question; it asks for ``--yes`` or Django's ``--noinput``/``--no-input``."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from pki import services
from pki.models import CertificateAuthority

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard input is a pipe that is already closed, as under cron, CI or ``< /dev/null``."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    services.ca_bootstrap()


def rotate(*flags: str) -> str:
    out = io.StringIO()
    call_command("pki", "rotate-ca", *flags, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_given_no_terminal_and_no_yes_when_rotating_then_a_one_line_error_naming_yes(no_terminal):
    with pytest.raises(CommandError) as failure:
        rotate()
    message = str(failure.value)
    assert "--yes" in message and "\n" not in message
    assert CertificateAuthority.objects.count() == 1


@pytest.mark.parametrize("flag", ["--yes", "--noinput", "--no-input"])
def test_given_no_terminal_and_a_confirming_flag_when_rotating_then_the_new_ca_joins(no_terminal, flag):
    assert "joined the bundle" in rotate(flag)
    assert CertificateAuthority.objects.count() == 2
