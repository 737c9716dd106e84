"""``Authorization: Bearer <token>`` accepted like DRF's ``Token <token>``.

Kubernetes clients and most HTTP tools send bearer tokens; answering them "credentials were not
provided" sent users looking for a missing header. Both keywords find the same token.
"""

from rest_framework.authentication import TokenAuthentication


class BearerTokenAuthentication(TokenAuthentication):
    keyword = "Bearer"
