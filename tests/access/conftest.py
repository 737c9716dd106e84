"""A fleet of two regions and people bound to one of them (bindings by user name: the same
scope service decides whatever the account's origin; the sso tier does it with provider groups)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from access.models import FleetRoleBinding
from fleet.models import Kyma
from tests.factories import KymaFactory

EU = {"kyma-project.io/region": "eu-west-1", "kyma-project.io/broker-plan-name": "aws"}
US = {"kyma-project.io/region": "us-east-1", "kyma-project.io/broker-plan-name": "aws"}
EU_ONLY = {"matchLabels": {"kyma-project.io/region": "eu-west-1"}}


@dataclass
class Person:
    name: str
    admin: Client
    api: APIClient


@dataclass
class Fleet:
    eu: Kyma
    eu2: Kyma
    us: Kyma


@pytest.fixture
def fleet(db) -> Fleet:
    return Fleet(
        eu=KymaFactory(name="eu-1", labels=EU),
        eu2=KymaFactory(name="eu-2", labels=EU),
        us=KymaFactory(name="us-1", labels=US),
    )


@pytest.fixture
def person(db):
    """``person("eu-op", "operator", EU_ONLY)``: a staff user bound to a role and scope."""

    def make(name: str, role: str, selector: dict | None = None) -> Person:
        user = get_user_model().objects.create_user(name, password="pw-123456789", is_staff=True)
        FleetRoleBinding.objects.create(
            name=f"{name}-binding", role=role, users=[name], selector=selector or {}
        )
        admin = Client()
        admin.force_login(user, backend="access.backends.LocalPasswordBackend")
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        return Person(name, admin, api)

    return make
