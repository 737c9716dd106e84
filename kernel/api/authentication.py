"""``Authorization: Bearer <token>`` accepted like DRF's ``Token <token>``.

Kubernetes clients and most HTTP tools send bearer tokens; answering them "credentials were not
provided" sent users looking for a missing header. Both keywords find the same token.
"""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import TokenAuthentication


class BearerTokenAuthentication(TokenAuthentication):
    keyword = "Bearer"


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of the Bearer keyword (its own name beside DRF's ``tokenAuth``)."""

    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "the same API token as `Token <key>`"}
