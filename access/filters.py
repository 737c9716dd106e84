"""The filter backend every API viewset has (``DEFAULT_FILTER_BACKENDS``): lists and lookups of a
model that belongs to a Kyma hold only the user's Kymas' rows. Its own module: DRF imports it
while it builds its view classes, before the rest of the access API can be imported."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework.filters import BaseFilterBackend
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request

from .roles import CHANGE, VIEW
from .scope import scoped


class ScopeFilterBackend(BaseFilterBackend):
    """Every list and lookup of a model that belongs to a Kyma holds only the user's Kymas' rows
    (a write to many at once, ``?all=true``, only those it may change)."""

    def filter_queryset(self, request: Request, queryset: QuerySet, view: Any) -> QuerySet:
        bulk_write = request.method not in SAFE_METHODS and not getattr(view, "detail", False)
        return scoped(request.user, queryset, CHANGE if bulk_write else VIEW)
