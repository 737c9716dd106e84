"""The reconciler: makes what each Kyma says true in its runtime (the engine, its runtime steps,
the reconcile task and the commands about runtimes). It sits above ``watchers`` and ``pki`` and
reads the fleet domain (``fleet``) below them; nothing below imports it (a task below publishes
``controlplane.kyma_reconcile`` by its name)."""
