from django.apps import AppConfig


class FleetConfig(AppConfig):
    """The fleet domain: Kymas, the module catalog, ModuleConfigs, SyncResources, the reconciler.

    Its label stays ``controlplane`` (the package's name before the split), so tables, migrations,
    content types, permissions and admin URLs (``/admin/controlplane/...``) are unchanged.
    """

    name = "fleet"
    label = "controlplane"
    verbose_name = "Fleet"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured, ValidationError
        from django.db.models.signals import post_delete

        from kernel.metrics import register_collector

        from . import metrics
        from .models import ModuleConfig
        from .models.rollout import validate_policies
        from .resources import kinds, rollouts  # noqa: F401 - register the document kinds
        from .rollouts import kymaspec, subjects  # noqa: F401 - register the rollout subjects
        from .services.revisions import moduleconfig_deleted

        try:
            validate_policies(settings.ROLLOUT_POLICY)
        except ValidationError as exc:
            raise ImproperlyConfigured(f"ROLLOUT_POLICY: {'; '.join(exc.messages)}") from None
        register_collector("kymas", metrics.collect)
        post_delete.connect(moduleconfig_deleted, sender=ModuleConfig, dispatch_uid="moduleconfig_tombstone")
