"""``{{ value|when }}``: the one time format of the admin pages (see kernel.timefmt)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from kernel.admin import when as when_html

register = template.Library()


@register.filter
def when(value: object) -> SafeString | str:
    return when_html(value)


@register.filter
def when_stacked(value: object) -> SafeString | str:
    """The same, relative time on a second line (narrow list columns)."""
    return when_html(value, stacked=True)
