from django.apps import AppConfig


class ListenerConfig(AppConfig):
    name = "listener"
    default_auto_field = "django.db.models.BigAutoField"
