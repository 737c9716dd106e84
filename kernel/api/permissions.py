"""API permissions: model permissions for every method, reads included."""

from rest_framework.permissions import DjangoModelPermissions


class StaffModelPermissions(DjangoModelPermissions):
    """Authenticated users with the model's view/add/change/delete permission (superusers: all)."""

    perms_map = {
        **DjangoModelPermissions.perms_map,
        "GET": ["%(app_label)s.view_%(model_name)s"],
        "HEAD": ["%(app_label)s.view_%(model_name)s"],
        "OPTIONS": ["%(app_label)s.view_%(model_name)s"],
    }
