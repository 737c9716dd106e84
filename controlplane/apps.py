from django.apps import AppConfig


class ProjectConfig(AppConfig):
    """The project itself (settings, URLs, Celery app, health, metrics) and its role commands:
    ``serve`` and ``up``. The label ``controlplane`` belongs to the fleet app (see fleet.apps)."""

    name = "controlplane"
    label = "project"
    verbose_name = "Control plane"
