from django.apps import AppConfig


class ProjectConfig(AppConfig):
    """The project itself (settings, URLs, Celery app, health, metrics), its role commands
    ``serve`` and ``up``, and the lease that elects one beat. The label ``controlplane`` belongs
    to the fleet app (see fleet.apps)."""

    name = "controlplane"
    label = "project"
    verbose_name = "Control plane"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from kernel.metrics import register_collector

        from . import metrics, worker  # noqa: F401 - the worker's signal handlers

        register_collector("beat", metrics.collect)
