"""Form fields of the admin that need more than Django's."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django.forms.fields import InvalidJSONInput, JSONString

from kernel.documents.nesting import json_loads

SOURCE = "JSON"


class BoundedJSONField(forms.JSONField):
    """Django's JSON textarea, parsing as every door parses (``kernel.documents.nesting``): what
    no door accepts (too deep, too large, an integer of thousands of digits, ``NaN``, unstorable
    text) is a field error saying why. Django's own lets ``json.loads``'s ``RecursionError`` and
    the interpreter's ``ValueError`` for integers over 4,300 digits through: a 500."""

    def to_python(self, value: Any) -> Any:
        if self.disabled or not isinstance(value, str) or value in self.empty_values:
            return super().to_python(value)
        try:
            converted = json_loads(value, source=SOURCE)
        except json.JSONDecodeError as exc:
            raise ValidationError(
                f"Enter a valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).", code="invalid"
            ) from None
        except ValueError as exc:  # DocumentInvalid: parses, but no door accepts it
            raise ValidationError(str(exc), code="invalid") from None
        return JSONString(converted) if isinstance(converted, str) else converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        """What the form shows again after an error: the text as typed when it does not parse."""
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            return json_loads(data, source=SOURCE)
        except ValueError:
            return InvalidJSONInput(data)


#: An admin's ``formfield_overrides`` for its model's JSON columns: every admin with an editable
#: JSON column uses it (``tests/kernel/test_admin_json_fields.py`` walks the admin site to say so).
BOUNDED_JSON = {models.JSONField: {"form_class": BoundedJSONField}}
