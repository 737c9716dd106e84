"""Python-level access to an emulator, for tests, demos and benchmarks.

Reads return private copies. Writes "as a user" go through exactly the path an HTTP request
takes — admission webhooks, field managers, controllers — so ``edit_as_user`` behaves like a
``kubectl edit`` (and triggers the same webhooks). All methods are synchronous and thread-safe:
they hop onto the host's event loop (so they must not be called from that loop; use
``await emulator.engine.write(...)`` there).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from kmock import KubernetesError

from runtime_emulator import catalog, patches, podsecurity
from runtime_emulator.admission import UserInfo
from runtime_emulator.catalog import ResourceType
from runtime_emulator.engine import ADMIN, Write
from runtime_emulator.pods import PodHealth

if TYPE_CHECKING:
    from runtime_emulator.emulator import RuntimeEmulator

T = TypeVar("T")
CONFLICT_RETRIES = 5  # edit_as_user: reads again after a 409 Conflict, as a user would
PATCH_TYPES = {"merge": patches.MERGE, "strategic": patches.STRATEGIC, "json": patches.JSON_PATCH}


class UserActions:
    """Mixed into :class:`RuntimeEmulator`."""

    __slots__ = ()

    def _self(self) -> RuntimeEmulator:
        return self  # type: ignore[return-value]

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        host = self._self().host
        if host is None:
            coro.close()
            raise RuntimeError("this emulator is not served by an EmulatorHost")
        return host.run(coro)

    def resource_type(self, resource: str | ResourceType) -> ResourceType:
        """``'apps/v1/deployments'``, ``'v1/secrets'``, ``'deployments'``, ``'Deployment'``..."""
        return resource if isinstance(resource, ResourceType) else self._self().catalog.resolve(resource)

    # -- reads ---------------------------------------------------------------------------------

    def get_object(
        self, resource: str | ResourceType, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """A copy of a stored object, or ``None``."""
        rtype = self.resource_type(resource)
        obj = self._self().store.get(rtype.storage, namespace if rtype.namespaced else None, name)
        return None if obj is None else patches.clone(obj)

    def list_objects(
        self, resource: str | ResourceType, namespace: str | None = None, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        """Copies of the stored objects of a resource, optionally filtered."""
        rtype = self.resource_type(resource)

        async def select() -> list[dict[str, Any]]:
            return patches.clone(self._self().engine.select(rtype, namespace, label_selector))

        return self._run(select())

    # -- writes as a user ------------------------------------------------------------------------

    def _write(self, write: Write) -> dict[str, Any]:
        return self._run(self._self().engine.write(write)).body

    def _locate(self, obj: Mapping[str, Any]) -> tuple[ResourceType, str | None, str]:
        rtype = self._self().catalog.for_object(obj)
        meta = obj.get("metadata") or {}
        return rtype, meta.get("namespace") if rtype.namespaced else None, meta.get("name", "")

    def create_as_user(
        self, obj: Mapping[str, Any], *, user: str = "test-user", field_manager: str = "kubectl-create"
    ) -> dict[str, Any]:
        """Like ``kubectl create``: a POST as ``user``."""
        rtype, namespace, _ = self._locate(obj)
        return self._write(
            Write("create", rtype, namespace, body=obj, field_manager=field_manager, user=_user(user))
        )

    def apply_as_user(
        self,
        obj: Mapping[str, Any],
        *,
        field_manager: str = "kubectl",
        force: bool = True,
        user: str = "test-user",
        subresource: str = "",
    ) -> dict[str, Any]:
        """Server-side apply, like ``kubectl apply --server-side [--force-conflicts]``."""
        rtype, namespace, name = self._locate(obj)
        write = Write(
            "apply", rtype, namespace, name, subresource, obj, field_manager=field_manager, force=force
        )
        write.user = _user(user)
        return self._write(write)

    def edit_as_user(
        self,
        resource: str | ResourceType,
        name: str,
        mutate: Callable[[dict[str, Any]], None],
        namespace: str | None = None,
        *,
        user: str = "test-user",
        field_manager: str = "kubectl-edit",
    ) -> dict[str, Any]:
        """Like ``kubectl edit``: read, let ``mutate`` change the copy in place, PUT it back.

        The PUT carries the resourceVersion read, so a write by someone else in between (a
        controller updating the status while an admission webhook is called) is a 409 Conflict:
        then the object is read again and ``mutate`` applied to the fresh copy, as a user would
        (and as client-go's ``RetryOnConflict`` does), up to ``CONFLICT_RETRIES`` times."""
        rtype = self.resource_type(resource)
        emulator = self._self()

        async def edit() -> dict[str, Any]:
            retries = CONFLICT_RETRIES
            while True:
                obj = patches.clone(emulator.engine.get(rtype, namespace, name))
                mutate(obj)
                write = Write(
                    "update", rtype, namespace, name, body=obj, field_manager=field_manager, user=_user(user)
                )
                try:
                    return (await emulator.engine.write(write)).body
                except KubernetesError as error:
                    if error.reason != "Conflict" or retries == 0:
                        raise
                    retries -= 1

        return self._run(edit())

    def patch_as_user(
        self,
        resource: str | ResourceType,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str = "",
        user: str = "test-user",
        field_manager: str = "kubectl-patch",
    ) -> dict[str, Any]:
        """Like ``kubectl patch --type=merge|strategic|json``."""
        rtype = self.resource_type(resource)
        write = Write(
            "patch", rtype, namespace, name, subresource, patch, PATCH_TYPES[patch_type], field_manager
        )
        write.user = _user(user)
        return self._write(write)

    def delete_as_user(
        self,
        resource: str | ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        user: str = "test-user",
    ) -> dict[str, Any]:
        """Like ``kubectl delete``: finalizers and admission apply."""
        return self._write(Write("delete", self.resource_type(resource), namespace, name, user=_user(user)))

    def register_crd(self, crd: Mapping[str, Any]) -> dict[str, Any]:
        """Create or update a CustomResourceDefinition; its resources are served at once."""
        name = (crd.get("metadata") or {}).get("name", "")
        write = Write(
            "apply", catalog.CRDS, None, name, body=crd, field_manager="emulator", force=True, user=ADMIN
        )
        return self._write(write)

    def harden(self, namespace: str = "kyma-system", *, user: str = "test-user") -> None:
        """What security-minded customers do to a namespace: enforce the "restricted" Pod Security
        Standard (:mod:`runtime_emulator.podsecurity`) and deny all traffic of its pods by a
        NetworkPolicy (see :mod:`runtime_emulator.netpol`), creating the namespace if need be."""
        labels = {podsecurity.ENFORCE_LABEL: podsecurity.RESTRICTED}
        self.apply_as_user(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}},
            user=user,
        )
        self.apply_as_user(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "deny-all", "namespace": namespace},
                "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
            },
            user=user,
        )

    # -- workloads, faults, connectivity ---------------------------------------------------------

    def set_pod_health(self, namespace: str, deployment: str, health: PodHealth | None) -> None:
        """Force a failure mode (or ``None`` to return to normal) for a Deployment's pods."""
        self._run(self._self().workloads.set_health(namespace, deployment, health))

    def set_reachable(self, reachable: bool) -> None:
        """Refuse connections (and reset open ones), or accept them again on the same port."""
        emulator = self._self()
        if emulator.host is None:
            raise RuntimeError("this emulator is not served by an EmulatorHost")
        self._run(emulator.host.serve(emulator) if reachable else emulator.close())

    # -- client configuration ---------------------------------------------------------------------

    def kubeconfig(self, context: str | None = None) -> dict[str, Any]:
        """A kubeconfig dict (``kubernetes.config.new_client_from_config_dict`` accepts it)."""
        emulator = self._self()
        name = context or emulator.name
        cluster: dict[str, Any] = {"server": emulator.url}
        if emulator.tls is not None:
            ca = emulator.tls.ca_pem or emulator.tls.cert_pem
            cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": name, "user": {"token": emulator.token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
            "preferences": {},
        }

    def kubeconfig_yaml(self, context: str | None = None) -> str:
        """The kubeconfig as YAML, for files and ``KUBECONFIG``."""
        return yaml.safe_dump(self.kubeconfig(context), sort_keys=False)


def _user(name: str) -> UserInfo:
    return ADMIN if name == ADMIN.username else UserInfo(name)
