"""What the login page needs to know: is single sign-on there, may passwords be used."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest


def login_options(request: HttpRequest) -> dict[str, Any]:
    return {"sso_enabled": bool(settings.OIDC_ISSUER), "local_login": settings.LOCAL_LOGIN}
