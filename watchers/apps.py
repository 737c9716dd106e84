from django.apps import AppConfig


class WatchersConfig(AppConfig):
    name = "watchers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import (
            resources,  # noqa: F401 - registers the Watcher kind
            rollouts,  # noqa: F401 - registers the rollout subjects of this app
        )
