from django.apps import AppConfig


class ControlplaneConfig(AppConfig):
    name = "controlplane"
    verbose_name = "Fleet"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .resources import kinds  # noqa: F401 - registers the document kinds
