from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The console: admin, dashboard, REST API and the fleet's commands. No models of its own; its
    admin registers the fleet's (their admin URLs keep the fleet's label: ``/admin/controlplane/``)."""

    name = "console"
    verbose_name = "Console"
