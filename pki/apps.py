from django.apps import AppConfig


class PkiConfig(AppConfig):
    name = "pki"
    verbose_name = "PKI"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from kernel.metrics import register_collector

        from . import jobs, metrics

        register_collector("pki", metrics.collect)
        jobs.register()
