"""An example module manager for keda on ``kyma_module_sdk`` (``make run`` runs it).

The module CR's spec decides the operator Deployment's replicas and a ConfigMap in each runtime;
the module version the runtime gets (a rollout hands it out wave by wave) decides the image.
Environment: ``KCP_API`` (e.g. ``http://127.0.0.1:8000/api/v1``), ``KCP_TOKEN``, ``STATE_FILE``.
"""

import os

from kyma_module_sdk import Manager, ModuleConfig

manager = Manager(
    api=os.environ["KCP_API"],
    token=os.environ["KCP_TOKEN"],
    module="keda",
    state_file=os.environ.get("STATE_FILE", "keda-manager.state"),
)


@manager.handler
def keda(config: ModuleConfig) -> list[dict]:
    replicas = int(config.resource.get("replicas", 1))
    labels = {"app.kubernetes.io/name": "keda-operator"}
    container = {"name": "keda-operator", "image": f"ghcr.io/kedacore/keda:{config.version or '2.14.0'}"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "keda-config", "namespace": "kyma-system"},
            "data": {
                "replicas": str(replicas),
                "logLevel": str(config.resource.get("logLevel", "info")),
                "version": config.version,
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "keda-operator", "namespace": "kyma-system", "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
            },
        },
    ]


if __name__ == "__main__":
    manager.main()
