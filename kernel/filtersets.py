"""FilterSets shared by every app's API and admin: one definition of what a list can be filtered
and searched by (NetBox's rule). The API uses them through django-filter; the admin through
:class:`FilterSetAdmin` (search) and :func:`admin_filter` (sidebar filters)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import django_filters
from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.http import HttpRequest, QueryDict
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

DISTINCT_VALUES_SHOWN = 50

RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})(?P<fraction>\.\d+)?"
    r"(?P<zone>[Zz]|[+-]\d{2}:\d{2})"
)


class RFC3339Field(forms.Field):
    """A timestamp as RFC 3339 writes it: date, time and a time zone (``Z`` or ``±hh:mm``)."""

    default_error_messages = {
        "invalid": "Enter an RFC 3339 timestamp with a time zone, e.g. 2025-01-31T12:00:00Z.",
    }

    def to_python(self, value: Any) -> dt.datetime | None:
        if value in self.empty_values:
            return None
        match = RFC3339.fullmatch(str(value).strip())
        if match is None:
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        fraction = (match["fraction"] or "")[:7]  # Python keeps microseconds
        zone = "+00:00" if match["zone"] in ("Z", "z") else match["zone"]
        try:
            return dt.datetime.fromisoformat(f"{match['date']}T{match['time']}{fraction}{zone}")
        except ValueError:  # well-formed but not a real moment (month 13, 25:00, ...)
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


@extend_schema_field(OpenApiTypes.DATETIME)
class RFC3339Filter(django_filters.Filter):
    field_class = RFC3339Field


class SearchFilterSet(django_filters.FilterSet):
    """Adds ``q``: a case-insensitive search over the fields in ``search_fields``."""

    search_fields: tuple[str, ...] = ("name",)
    q = django_filters.CharFilter(method="search", label="Search")

    def search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        query = Q()
        for field in self.search_fields:
            query |= Q(**{f"{field}__icontains": value})
        return queryset.filter(query)


class StateFilter(django_filters.MultipleChoiceFilter):
    """States of a status field whose empty value means "not reconciled yet": that one is asked
    for by its label (``?state=New``), which a query string can carry, unlike an empty value."""

    def __init__(self, *args: Any, choices: list[tuple[str, str]], **kwargs: Any) -> None:
        self.empty_label = next((label for value, label in choices if value == ""), None)
        named = [(value or label, label) for value, label in choices]
        super().__init__(*args, choices=named, **kwargs)

    def filter(self, qs: QuerySet, value: list[str]) -> QuerySet:
        return super().filter(qs, ["" if item == self.empty_label else item for item in value])


def admin_filter(filterset: type[django_filters.FilterSet], name: str) -> type[admin.SimpleListFilter]:
    """An admin sidebar filter that filters through the API's FilterSet (same parameter name,
    same choices, same query)."""
    declared = filterset.base_filters[name]

    class FilterSetListFilter(admin.SimpleListFilter):
        title = str(declared.label or name.replace("_", " "))
        parameter_name = name

        def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
            choices = declared.extra.get("choices")
            if choices is not None:
                return [
                    (str(value), str(label)) for value, label in (choices() if callable(choices) else choices)
                ]
            values = (
                model_admin.model.objects.exclude(**{declared.field_name: ""})
                .order_by(declared.field_name)
                .values_list(declared.field_name, flat=True)
                .distinct()[:DISTINCT_VALUES_SHOWN]
            )
            return [(str(value), str(value)) for value in values]

        def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
            if self.value() is None:
                return queryset
            data = QueryDict(mutable=True)
            data[name] = self.value()
            found = filterset(data, queryset=queryset)
            return found.qs if found.is_valid() else queryset.none()

    FilterSetListFilter.__name__ = f"{filterset.__name__}_{name}"
    return FilterSetListFilter


class FilterSetAdmin(admin.ModelAdmin):
    """The admin's search box searches like the API's ``?q=`` (the FilterSet's ``search``)."""

    filterset_class: type[SearchFilterSet] | None = None

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        if self.filterset_class is None or not search_term:
            return super().get_search_results(request, queryset, search_term)
        return self.filterset_class({"q": search_term}, queryset=queryset).qs, False
