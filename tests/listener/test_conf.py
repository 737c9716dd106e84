"""The settings the listener keeps as plain attributes follow every change of them."""

from __future__ import annotations

import pytest

from listener import services
from listener.conf import HOT, NAMES
from listener.identity import ClientIdentity
from tests.factories import KymaFactory


def test_given_a_setting_changed_then_the_kept_value_follows(settings):
    settings.LISTENER_RECONCILE_COMPONENT = "another-manager"
    settings.LISTENER_MODE = "proxy"

    kept = {name: getattr(HOT, name) for name in NAMES}

    assert kept["LISTENER_RECONCILE_COMPONENT"] == "another-manager"
    assert kept == {name: getattr(settings, name) for name in NAMES}


@pytest.mark.django_db
def test_given_san_pinning_turned_off_then_a_certificate_without_the_san_speaks_for_its_runtime(settings):
    kyma = KymaFactory(runtime_id="rt-conf", skr_domain="rt-conf.kyma.example.com")
    services.KYMAS_BY_RUNTIME.clear()
    stranger = ClientIdentity(kyma.runtime_id, ("elsewhere.example.com",), "-", "")
    with pytest.raises(services.Forbidden):
        services.runtime_for(None, stranger)

    settings.LISTENER_SAN_PINNING = False

    assert services.runtime_for(None, stranger).id == kyma.pk
