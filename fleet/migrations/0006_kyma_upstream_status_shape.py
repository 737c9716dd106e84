# Upstream's Kyma status shape: status.modules[].resource as {apiVersion, kind, metadata} and no
# customResourcePolicy (which CRs to delete moves to owned_module_resources); upstream's finalizer.

from django.db import migrations, models

OLD_FINALIZER = "operator.kyma-project.io/kyma"
FINALIZER = "operator.kyma-project.io/Kyma"


def _reshape(kyma) -> bool:
    """Rewrite one Kyma's stored status into upstream's shape; True when something changed."""
    owned, entries = dict(kyma.owned_module_resources or {}), []
    for entry in kyma.module_status or []:
        entry = dict(entry)
        policy = entry.pop("customResourcePolicy", "CreateAndDelete")
        resource = entry.get("resource")
        if isinstance(resource, dict) and "name" in resource:  # the old flat reference
            ref = {key: resource.get(key, "") for key in ("apiVersion", "kind", "name", "namespace")}
            if policy == "CreateAndDelete":
                owned[entry["name"]] = ref
            metadata = {"name": ref["name"], **({"namespace": ref["namespace"]} if ref["namespace"] else {})}
            entry["resource"] = {"apiVersion": ref["apiVersion"], "kind": ref["kind"], "metadata": metadata}
        entries.append(entry)
    finalizers = []
    for name in kyma.finalizers or []:
        name = FINALIZER if name == OLD_FINALIZER else name
        if name not in finalizers:
            finalizers.append(name)
    if (entries, owned, finalizers) == (kyma.module_status, kyma.owned_module_resources, kyma.finalizers):
        return False
    kyma.module_status, kyma.owned_module_resources, kyma.finalizers = entries, owned, finalizers
    return True


def forwards(apps, schema_editor) -> None:
    Kyma = apps.get_model("controlplane", "Kyma")
    for kyma in Kyma.objects.only("pk", "module_status", "finalizers", "owned_module_resources").iterator():
        if _reshape(kyma):
            kyma.save(update_fields=["module_status", "owned_module_resources", "finalizers"])


class Migration(migrations.Migration):
    dependencies = [
        ("controlplane", "0005_reconcile_not_before"),
    ]

    operations = [
        migrations.AddField(
            model_name="kyma",
            name="owned_module_resources",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
