from django.apps import AppConfig


class PkiConfig(AppConfig):
    name = "pki"
    verbose_name = "PKI"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.metrics import register_fleet_collector

        from . import metrics

        register_fleet_collector("pki", metrics.collect)
