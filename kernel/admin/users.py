"""Users and groups in the admin, with every write in the audit trail (Django's own ``LogEntry``
says only "Changed groups."): who added, changed or deleted a user or group, and what changed,
groups and permissions included. A password is recorded only as set, changed or disabled, never
its hash."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.forms import AdminPasswordChangeForm
from django.contrib.auth.models import Group
from django.db import transaction

from kernel import audit

from .base import AuditedWritesMixin


class AuditedPasswordChangeForm(AdminPasswordChangeForm):
    """The admin's *Change password* page: the new password (or its disabling) is recorded."""

    def save(self, commit: bool = True) -> Any:
        with transaction.atomic():
            before = audit.stored_values(self.user)
            user = super().save(commit=commit)
            if commit:
                audit.record_change(user, before=before)
        return user


class AuditedUserAdmin(AuditedWritesMixin, UserAdmin):
    change_password_form = AuditedPasswordChangeForm


class AuditedGroupAdmin(AuditedWritesMixin, GroupAdmin):
    pass


for model, model_admin in ((get_user_model(), AuditedUserAdmin), (Group, AuditedGroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
