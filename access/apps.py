from django.apps import AppConfig


class AccessConfig(AppConfig):
    """Who may do what: single sign-on, role bindings, scopes (see the package's docstring)."""

    name = "access"
    verbose_name = "Access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib import admin
        from django.contrib.auth.signals import user_logged_in, user_logged_out

        from kernel.api.permissions import register_document_check, register_object_check

        from . import api, documents  # noqa: F401 - registers the FleetRoleBinding kind
        from .admin_scope import scope_admin_site
        from .sessions import on_login, on_logout

        scope_admin_site(admin.site)
        register_object_check(api.object_check)
        register_document_check(api.document_check)
        user_logged_in.connect(on_login, dispatch_uid="access_login")
        user_logged_out.connect(on_logout, dispatch_uid="access_logout")
