"""The FilterSet base shared by every app's API and admin."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet


class SearchFilterSet(django_filters.FilterSet):
    """Adds ``q``: a case-insensitive search over the fields in ``search_fields``."""

    search_fields: tuple[str, ...] = ("name",)
    q = django_filters.CharFilter(method="search", label="Search")

    def search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        query = Q()
        for field in self.search_fields:
            query |= Q(**{f"{field}__icontains": value})
        return queryset.filter(query)
