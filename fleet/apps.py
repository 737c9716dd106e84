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
        from kernel.metrics import register_collector

        from . import metrics
        from .resources import kinds  # noqa: F401 - registers the document kinds

        register_collector("kymas", metrics.collect)
