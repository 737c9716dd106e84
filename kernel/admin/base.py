"""Pieces every model admin uses: state badges, ages, write-only secrets, two-step deletes, the
audit trail as an object's *History*, and audited writes for models without a service of their own."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets, unquote
from django.core.exceptions import PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from kernel import audit, timefmt
from kernel.documents.nesting import json_loads
from kernel.errors import ApplicationError, ValidationFailed
from kernel.fields import BOUNDED_JSON
from kernel.filtersets import FilterSetAdmin
from kernel.models import AuditEntry

STATE_COLOURS = {
    "Ready": "#1a7f37",
    "Processing": "#0969da",
    "Warning": "#9a6700",
    "Error": "#cf222e",
    "Deleting": "#6e7781",
    "": "#6e7781",
}


def state_badge(state: str, label: str | None = None) -> str:
    colour = STATE_COLOURS.get(state, "#6e7781")
    return format_html(
        '<span class="cp-badge" style="background:{};color:#fff;border-radius:10px;padding:1px 8px;'
        'font-size:11px;font-weight:600">{}</span>',
        colour,
        label or state or "New",
    )


def when(value: Any, *, stacked: bool = False, empty: str = "—") -> str:
    """The admin's one time format: ``2026-11-23 09:41:51 UTC`` with ``(5 min ago)`` beside it
    (below it when ``stacked``, for narrow list columns); accepts RFC 3339 strings from statuses."""
    moment = timefmt.parse_any(value)
    if moment is None:
        return empty if not value else str(value)
    return format_html(
        '<time class="cp-time{}" datetime="{}">{}</time> <span class="cp-ago">{}</span>',
        " cp-time-stacked" if stacked else "",
        timefmt.rfc3339(moment),
        timefmt.display(moment),
        timefmt.relative(moment),
    )


def age(value: Any) -> str:
    """A list column's time (absolute with seconds, how long ago below it)."""
    return when(value, stacked=True)


def secret_state(sealed: Any) -> str:
    return "set" if sealed else "not set"


def object_button(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A button on one object's admin page (a ModelAdmin method ``view(self, request, obj, ...)``,
    served at a URL with ``object_id``): POST only (else 405), the object as the admin finds it
    (else 404) and the change permission on it (else 403), in that order, before the view runs."""

    @functools.wraps(view)
    def wrapper(
        self: admin.ModelAdmin, request: HttpRequest, object_id: str, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"no {self.model._meta.verbose_name} with id {object_id!r}")
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        return view(self, request, obj, *args, **kwargs)

    return wrapper


class SecretTextarea(forms.Textarea):
    """A textarea that is always rendered empty: what was pasted into it (a kubeconfig's token and
    key) never comes back in a page, not even the form shown again after a validation error."""

    def get_context(self, name: str, value: Any, attrs: dict | None) -> dict[str, Any]:
        return super().get_context(name, None, attrs)


class WriteOnlySecretField(forms.CharField):
    """A secret input that never shows a value: neither the stored one (it only says whether one
    is set) nor the one just submitted, when the form comes back with an error."""

    def __init__(self, *, textarea: bool = True, **kwargs: Any) -> None:
        widget = (
            SecretTextarea(attrs={"rows": 6, "autocomplete": "off", "spellcheck": "false"})
            if textarea
            else (forms.PasswordInput(render_value=False))
        )
        super().__init__(required=False, strip=False, widget=widget, **kwargs)


VERSION_FIELDS = ("opened_version", "opened_state")


def _normalized(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


class ResourceVersionForm(forms.ModelForm):
    """A change form that refuses to overwrite a write made since it was opened.

    Hidden fields carry the object's ``resource_version`` and its values when the form was
    opened; a save against a newer version is refused with the fields that changed meanwhile,
    instead of silently putting the old values back (a lost update)."""

    opened_version = forms.IntegerField(required=False, widget=forms.HiddenInput)
    opened_state = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.initial["opened_version"] = self.instance.resource_version
            self.initial["opened_state"] = json.dumps(self._state(), cls=DjangoJSONEncoder)

    def _state(self) -> dict[str, Any]:
        model_fields = {f.name for f in self._meta.model._meta.get_fields()}
        names = [n for n in self.fields if n in model_fields and n not in VERSION_FIELDS]
        return _normalized({name: self.initial.get(name) for name in names})

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        opened = data.get("opened_version")
        if self.instance.pk is None or opened is None or opened == self.instance.resource_version:
            return data
        try:
            # Posted back by the browser, so anything a client sends: parsed as every door parses.
            before = json_loads(data.get("opened_state") or "{}", source="opened_state")
        except ValueError:
            before = {}
        now = self._state()
        changed = [str(self.fields[n].label or n) for n in now if n in before and before[n] != now[n]]
        which = f" ({', '.join(changed)})" if changed else ""
        raise forms.ValidationError(
            f"This object was changed since you opened this form{which}: "
            "the object has been modified; reload the page to edit the latest version."
        )


class RefusalsShownMixin:
    """A save or delete the service refuses (a Kyma being deleted, a conflict) is shown on the
    page like a form error, the input kept; never a 500.

    The service runs after the form was valid, inside Django's save; on a refusal the view runs
    once more with a form that carries the refusal as its error, so the admin renders the form
    as posted (and the refusal is recorded like every refused form)."""

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: Any = None,
    ) -> Any:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)  # type: ignore[misc]
        except ApplicationError as exc:
            if request.method != "POST" or getattr(request, "_service_refusal", None) is not None:
                raise
            request._service_refusal = exc  # type: ignore[attr-defined]
            return super().changeform_view(request, object_id, form_url, extra_context)  # type: ignore[misc]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)  # type: ignore[misc]
        refusal = getattr(request, "_service_refusal", None)
        if refusal is None:
            return form

        class Refused(form):  # type: ignore[misc, valid-type]
            def clean(self) -> dict[str, Any]:
                super().clean()
                raise forms.ValidationError(refusal.message)

        return Refused

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> Any:
        try:
            return super().delete_view(request, object_id, extra_context)  # type: ignore[misc]
        except ApplicationError as exc:
            messages.error(request, f"Not deleted: {exc.message}")
            return HttpResponseRedirect(request.get_full_path())


class AuditHistoryMixin:
    """An object's *History* page is its audit trail: every write through every door (admin,
    API, commands, module credentials), newest first, with who, from where and what changed."""

    audit_history_template = "admin/audit_history.html"
    AUDIT_SHOWN = 200

    def audit_entries(self, obj: Any) -> QuerySet:
        kind, namespace, name, uid = audit.identity(obj)
        if uid:
            return AuditEntry.objects.filter(uid=uid)
        return AuditEntry.objects.filter(kind=kind, namespace=namespace, name=name)

    def history_view(self, request: HttpRequest, object_id: str, extra_context: dict | None = None) -> Any:
        obj = self.get_object(request, unquote(object_id))  # type: ignore[attr-defined]
        if obj is None or not self.has_view_or_change_permission(request, obj):  # type: ignore[attr-defined]
            return super().history_view(request, object_id, extra_context)  # type: ignore[misc]
        opts = self.model._meta  # type: ignore[attr-defined]
        context = {
            **self.admin_site.each_context(request),  # type: ignore[attr-defined]
            "title": f"History: {obj}",
            "subtitle": None,
            "opts": opts,
            "object": obj,
            "entries": list(self.audit_entries(obj)[: self.AUDIT_SHOWN]),
            "trail_url": reverse("admin:kernel_auditentry_changelist"),
            "kept_days": f"{settings.AUDIT_KEPT_DAYS:g}",
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name  # type: ignore[attr-defined]
        return TemplateResponse(request, self.audit_history_template, context)


class AuditedWritesMixin(AuditHistoryMixin):
    """The admin's own saves and deletes, recorded in the audit trail like every service's write,
    for models no service of ours writes (users, groups, the maintenance policy, finished jobs):
    what changed, many-to-many fields (groups, permissions) included, secrets never.

    Django saves the row (``save_model``), then its many-to-many fields (``save_related``), in
    one transaction: the row as stored before is taken in the first, the entry written after
    the second, so one entry says all the form changed."""

    def save_model(self, request: HttpRequest, obj: Any, form: forms.ModelForm, change: bool) -> None:
        request._audit_before = (  # type: ignore[attr-defined]
            (audit.stored_values(obj), audit.related_values(obj)) if change else (None, {})
        )
        super().save_model(request, obj, form, change)  # type: ignore[misc]

    def save_related(self, request: HttpRequest, form: forms.ModelForm, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)  # type: ignore[misc]
        before, related_before = getattr(request, "_audit_before", (None, {}))
        audit.record_change(form.instance, before=before, related_before=related_before)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        audit.record_object(obj, action="delete")
        super().delete_model(request, obj)  # type: ignore[misc]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        # Django's "delete selected" runs in no transaction of its own (the delete page does):
        # the entries and the delete are kept or lost together.
        with transaction.atomic():
            for obj in queryset:
                audit.record_object(obj, action="delete")
            super().delete_queryset(request, queryset)  # type: ignore[misc]


class ResourceAdmin(RefusalsShownMixin, AuditHistoryMixin, FilterSetAdmin):
    """Base admin: system fields read-only, application errors shown as messages, and deletes
    that go through the two-step service instead of removing rows under a running cleanup."""

    show_full_result_count = False
    list_per_page = 50
    form = ResourceVersionForm
    formfield_overrides = BOUNDED_JSON
    # Columns the changelist does not show; deferred there so a page stays cheap at fleet scale.
    changelist_defer: tuple[str, ...] = ()

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        match = getattr(request, "resolver_match", None)
        if self.changelist_defer and match is not None and match.url_name.endswith("_changelist"):
            queryset = queryset.defer(*self.changelist_defer)
        return queryset

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list:
        """The change form always posts the version hidden fields (see ResourceVersionForm)."""
        fieldsets = list(super().get_fieldsets(request, obj))
        present = set(flatten_fieldsets(fieldsets))
        missing = [name for name in VERSION_FIELDS if name not in present]
        if obj is None or not missing or not issubclass(self.form, ResourceVersionForm):
            return fieldsets
        return [*fieldsets, (None, {"fields": missing})]

    def delete_service(self, obj: Any) -> bool:
        raise NotImplementedError

    def render_change_form(
        self, request: HttpRequest, context: dict, add: bool = False, change: bool = False, **kwargs: Any
    ) -> Any:
        """A form posted and refused (its errors shown again) is a refused write: recorded."""
        adminform = context.get("adminform")
        form = getattr(adminform, "form", None)
        if request.method == "POST" and form is not None and form.errors:
            original = context.get("original")
            reasons = [
                f"{field}: {'; '.join(errors)}" if field != "__all__" else "; ".join(errors)
                for field, errors in form.errors.items()
            ]
            audit.record_refusal(
                ValidationFailed("; ".join(reasons)),
                action="create" if add else "update",
                kind=self.model.__name__,
                namespace=str(form.data.get("namespace", getattr(original, "namespace", "")))[:63],
                name=str(form.data.get("name", getattr(original, "name", "")))[:253],
                uid=str(getattr(original, "uid", "") or ""),
            )
        return super().render_change_form(request, context, add=add, change=change, **kwargs)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        if not self.delete_service(obj):
            messages.info(
                request, f"{obj} is being deleted: it stays in state Deleting until its cleanup is done."
            )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        pending = sum(0 if self.delete_service(obj) else 1 for obj in queryset)
        if pending:
            messages.info(
                request, f"{pending} object(s) are being deleted and stay until their cleanup is done."
            )


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records the control plane writes (events, reconciles, jobs): people look, never edit."""

    show_full_result_count = False
    list_per_page = 100

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def admin_link(obj: Any, label: str | None = None) -> str:
    """A link to an object's admin page."""
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, label if label is not None else str(obj))


class RecordAdmin(ReadOnlyAdmin):
    """No actions and no deletes: housekeeping bounds these tables, people only look."""

    actions = None

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
