from django.apps import AppConfig


class ReconcilerConfig(AppConfig):
    """The reconciler: the reconcile task, the engine and its runtime steps, and the commands about
    runtimes (``runtime_access``, ``runtime_edit``). No models: it reads and writes the fleet's."""

    name = "reconciler"
    verbose_name = "Reconciler"
