"""Form fields of the admin that need more than Django's."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput

from kernel.documents.nesting import DocumentInvalid, check_nesting, too_deep

SOURCE = "JSON"


class BoundedJSONField(forms.JSONField):
    """Django's JSON textarea, refusing what every door refuses (``kernel.documents.nesting``:
    too deep, too large, unstorable text) with a field error (Django's own lets ``json.loads``'s
    ``RecursionError`` through: a 500)."""

    def to_python(self, value: Any) -> Any:
        if self.disabled or not isinstance(value, str):
            return super().to_python(value)
        try:
            converted = super().to_python(value)
            check_nesting(converted, source=SOURCE)
        except RecursionError:
            raise ValidationError(str(too_deep(SOURCE)), code="invalid") from None
        except DocumentInvalid as exc:
            raise ValidationError(str(exc), code="invalid") from None
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        """What the form shows again after an error: the text as typed when it is too deep."""
        try:
            value = super().bound_data(data, initial)
            check_nesting(value, source=SOURCE)
        except (RecursionError, DocumentInvalid):
            return InvalidJSONInput(data)
        return value
