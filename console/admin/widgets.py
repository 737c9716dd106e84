"""The Kyma edit form's modules editor: one row per module instead of a JSON textarea.

Each row has the module (from the catalog), its channel (empty: the Kyma's), whether the
control plane manages it, and the custom-resource policy; a few empty rows add modules, a ticked
"remove" drops one. Fields a row has no input for (``controller``, ``remoteModuleTemplateRef``)
ride along in a hidden input, so editing a row never loses them. A client that posts ``modules``
as JSON (scripts, older forms) is still understood.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.template import loader
from django.utils.datastructures import MultiValueDict

from fleet.models import Module
from fleet.models.kyma import validate_modules
from kernel.fields import BoundedJSONField

EXTRA_ROWS = 3
EDITED = ("name", "channel", "managed", "customResourcePolicy")
POLICIES = ("CreateAndDelete", "Ignore")


def _catalog() -> dict[str, list[str]]:
    return {name: sorted(channels or {}) for name, channels in Module.objects.values_list("name", "channels")}


class ModulesWidget(forms.Widget):
    template_name = "admin/controlplane/kyma/modules_widget.html"

    def format_value(self, value: Any) -> str:
        """The JSON text of the modules (what a client posting ``modules`` as JSON sends)."""
        if isinstance(value, str):
            return value
        return json.dumps(value or [])

    def get_context(self, name: str, value: Any, attrs: dict | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        if isinstance(value, str):
            try:
                value = BoundedJSONField().to_python(value)
            except ValidationError:
                value = []
        modules = [m for m in value or [] if isinstance(m, dict)] if isinstance(value, list) else []
        catalog = _catalog()
        channels = sorted({channel for names in catalog.values() for channel in names})
        rows = []
        for index, module in enumerate([*modules, *({} for _ in range(EXTRA_ROWS))]):
            extra = {key: item for key, item in module.items() if key not in EDITED}
            rows.append(
                {
                    "index": index,
                    "prefix": f"{name}-{index}",
                    "name": module.get("name", ""),
                    "channel": module.get("channel", ""),
                    "managed": module.get("managed", True),
                    "policy": module.get("customResourcePolicy", "CreateAndDelete"),
                    "extra": json.dumps(extra) if extra else "",
                    "new": not module,
                    "known": module.get("name", "") in catalog or not module,
                }
            )
        context["widget"].update(
            rows=rows, catalog=sorted(catalog), channels=channels, policies=POLICIES, count=len(rows)
        )
        return context

    def render(self, name: str, value: Any, attrs: dict | None = None, renderer: Any = None) -> str:
        """With the project's templates (the form renderer only knows Django's own)."""
        return loader.render_to_string(self.template_name, self.get_context(name, value, attrs))

    def value_from_datadict(self, data: MultiValueDict, files: Any, name: str) -> Any:
        if name in data:  # JSON, as the textarea posted it
            return data.get(name)
        count = data.get(f"{name}-count")
        if count is None:
            return None
        modules: list[dict[str, Any]] = []
        for index in range(min(int(count) if str(count).isdigit() else 0, 500)):
            prefix = f"{name}-{index}"
            module_name = (data.get(f"{prefix}-name") or "").strip()
            if not module_name or data.get(f"{prefix}-remove"):
                continue
            module: dict[str, Any] = {"name": module_name}
            channel = (data.get(f"{prefix}-channel") or "").strip()
            if channel:
                module["channel"] = channel
            if not data.get(f"{prefix}-managed"):
                module["managed"] = False
            policy = data.get(f"{prefix}-policy") or "CreateAndDelete"
            if policy != "CreateAndDelete":
                module["customResourcePolicy"] = policy
            try:
                extra = BoundedJSONField().to_python(data.get(f"{prefix}-extra") or "{}")
            except ValidationError:
                extra = {}
            if isinstance(extra, dict):
                module.update({k: v for k, v in extra.items() if k not in EDITED})
            modules.append(module)
        return modules

    def value_omitted_from_data(self, data: MultiValueDict, files: Any, name: str) -> bool:
        return name not in data and f"{name}-count" not in data


class ModulesField(forms.Field):
    widget = ModulesWidget

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault(
            "help_text", "Channel empty: the Kyma's channel. Unmanaged: the control plane leaves it alone."
        )
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> list[dict[str, Any]]:
        if value in (None, ""):
            return []
        if isinstance(value, str):
            value = BoundedJSONField().to_python(value)  # refuses documents nested too deep
        if not isinstance(value, list):
            raise ValidationError("modules: a list of modules")
        return value

    def validate(self, value: list[dict[str, Any]]) -> None:
        super().validate(value)
        validate_modules(value)

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.to_python(initial) != self.to_python(data)
        except ValidationError:
            return True
