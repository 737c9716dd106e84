"""The API semantics of one emulated server, independent of HTTP.

Every write — from the HTTP API, from Python helpers simulating a user, or from the emulator's
own controllers — goes through :meth:`Engine.write`: build the next object version, run admission
(webhooks are awaited before anything is stored), then commit. Like the apiserver's
GuaranteedUpdate, the commit only happens if the object did not change while admission ran;
otherwise the write is recomputed against the new state (an explicit resourceVersion precondition
then turns into a 409 Conflict).
"""

from __future__ import annotations

import base64
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kmock import KubernetesError

from runtime_emulator import (
    build,
    catalog,
    defaults,
    errors,
    fields,
    patches,
    podsecurity,
    schemas,
    selectors,
    structural,
)
from runtime_emulator.admission import Admission, AdmissionRequest, UserInfo, configuration_problems
from runtime_emulator.catalog import Catalog, ResourceType
from runtime_emulator.schemas import ANY, Node
from runtime_emulator.store import Store

logger = logging.getLogger(__name__)

ADMIN = UserInfo("kubernetes-admin", ("system:masters", "system:authenticated"))
NAMESPACE_CONTROLLER = UserInfo("system:serviceaccount:kube-system:namespace-controller")
MAX_ATTEMPTS = 8
PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
SYSTEM_PRIORITIES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}
# The options an admission webhook is sent: a patch (an apply too) is an update, or a create when
# it creates the object, as a real server converts them.
OPTIONS_KINDS = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions"}


@dataclass(slots=True)
class Write:
    """One write request, whatever it came from."""

    verb: str  # create | update | patch | apply | delete
    rtype: ResourceType
    namespace: str | None = None
    name: str = ""
    subresource: str = ""
    body: Any = None
    patch_type: str = ""  # for "patch": a patches.MERGE / STRATEGIC / JSON_PATCH content type
    field_manager: str = ""
    force: bool = False
    dry_run: bool = False
    field_validation: str = ""  # Ignore | Warn (the default) | Strict
    manager_named: bool = True  # False: the field manager is the client's user agent (not an option)
    user: UserInfo = ADMIN
    # Writes made by the emulator's own controllers do not trigger them again.
    from_controller: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    # The body as sent, made again (the HTTP layer parses the request's bytes again): with it, the
    # first try builds from ``body`` itself, which it changes, and a retry from a fresh one;
    # without it, every try builds from a copy of ``body``.
    fresh_body: Callable[[], Any] | None = None


class Outcome(NamedTuple):
    """The result of a write: HTTP status, response body, resulting object."""

    status: int
    body: dict[str, Any]
    obj: dict[str, Any] | None  # the stored (or final) object
    removed: bool
    changed: bool


# Called after every committed write that changed something: (write, old, outcome).
CommitObserver = Callable[[Write, dict[str, Any] | None, Outcome], Awaitable[None]]


@functools.lru_cache(maxsize=4096)
def _typed_errors(schema: Node, body: str) -> tuple[str, ...]:
    # A fleet applies the same few documents to every runtime: each is checked once.
    return tuple(structural.typed_errors(json.loads(body), schema))


class Engine:
    """Reads and writes against one emulator's store, with admission and server-side rules."""

    __slots__ = ("_ips", "admission", "catalog", "observer", "store")

    def __init__(self, catalog_: Catalog, store: Store, admission: Admission) -> None:
        self.catalog = catalog_
        self.store = store
        self.admission = admission
        self.observer: CommitObserver | None = None
        self._ips = 0

    def _allocate_ip(self) -> str:
        self._ips += 1
        return f"10.96.{self._ips // 250}.{self._ips % 250 + 1}"

    def render(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """An object as served through ``rtype``'s version (CRD versions share storage)."""
        return obj if obj.get("apiVersion") == rtype.api_version else {**obj, "apiVersion": rtype.api_version}

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        """The object as served through ``rtype`` (404 if missing)."""
        obj = self.store.get(rtype.storage, namespace, name)
        if obj is None:
            raise errors.not_found(rtype.plural, rtype.group, name)
        return self.render(rtype, obj)

    def select(
        self, rtype: ResourceType, namespace: str | None, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        """Stored objects matching label/field selectors (400 for invalid selectors)."""
        try:
            labels = selectors.parse_labels(label_selector) if label_selector else ()
            field_reqs = selectors.parse_fields(field_selector) if field_selector else ()
        except ValueError as exc:
            raise errors.bad_request(str(exc)) from None
        for path, _, _ in field_reqs:
            if not rtype.selectable(path):
                raise errors.bad_request(
                    f'"{path}" is not a known field selector: only "metadata.name", "metadata.namespace"'
                )
        return [
            obj
            for obj in self.store.objects(rtype.storage, namespace)
            if (not labels or selectors.labels_match(labels, obj["metadata"].get("labels")))
            and (not field_reqs or selectors.fields_match(field_reqs, obj))
        ]

    def list(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> dict[str, Any]:
        """A ``<Kind>List`` with the current resourceVersion (and limit/continue paging)."""
        self.store.start_log()
        items = self.select(rtype, namespace, label_selector, field_selector)
        metadata: dict[str, Any] = {"resourceVersion": str(self.store.resource_version)}
        if continue_token:
            try:
                after = tuple(json.loads(base64.urlsafe_b64decode(continue_token)))
            except ValueError:
                raise errors.bad_request("invalid continue token") from None
            items = [
                o for o in items if (o["metadata"].get("namespace") or "", o["metadata"]["name"]) > after
            ]
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            token = json.dumps([last.get("namespace") or "", last["name"]]).encode()
            metadata["continue"] = base64.urlsafe_b64encode(token).decode()
            if not label_selector and not field_selector:  # (a real server does not count a selection)
                metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if rtype.builtin:
            rendered = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]
        else:
            rendered = [self.render(rtype, o) for o in items]
        return {
            "apiVersion": rtype.api_version,
            "kind": rtype.list_kind,
            "metadata": metadata,
            "items": rendered,
        }

    def seed(self, rtype: ResourceType, body: dict[str, Any]) -> dict[str, Any]:
        """Store initial cluster content directly: no admission, no controllers, no managedFields."""
        obj = build.created(rtype, body, (body.get("metadata") or {}).get("namespace"))
        defaults.apply_defaults(rtype, obj, None, self._allocate_ip)
        status = defaults.initial_status(rtype)
        if status is not None:
            obj["status"] = status
        if rtype is catalog.CRDS:
            obj["status"] = build.crd_status(obj, None)
            self.catalog.register(catalog.types_from_crd(obj))
        return self.store.put(rtype.storage, obj, "ADDED")

    async def write(self, w: Write) -> Outcome:
        """Apply one write: build, admit, commit (recomputing if the object moved meanwhile)."""
        storage = w.rtype.storage
        for attempt in range(MAX_ATTEMPTS):
            old = self.store.get(storage, w.namespace, w.name) if w.name else None
            # Building mutates the body, and a retry must start from the request as sent.
            operation, new = self._plan(w, old, self._body(w, attempt))
            if operation == "DELETE" and old is not None and old["metadata"].get("deletionTimestamp"):
                return Outcome(200, self.render(w.rtype, old), old, False, False)
            name = (new or old or {}).get("metadata", {}).get("name", w.name)
            request = AdmissionRequest(
                operation,
                w.rtype,
                w.subresource,
                w.namespace,
                name,
                new,
                old,
                w.user,
                w.dry_run,
                self._options(w, operation),
            )
            admitted = await self.admission.review(request)
            if self.store.get(storage, w.namespace, name) is not old:
                continue  # changed while admission ran: recompute against the new state
            outcome = self._commit(w, old, admitted)
            if outcome.changed and not w.dry_run:
                await self._after(w, old, outcome)
            return outcome
        raise errors.conflict(w.rtype.plural, w.rtype.group, w.name, "the object keeps changing; try again")

    @staticmethod
    def _body(w: Write, attempt: int) -> Any:
        """The body a try builds from (see ``Write.fresh_body``). A request's own body is not
        copied for its first try: the copy was 4 % of the emulator's CPU of a first reconcile."""
        if w.fresh_body is None:
            return patches.clone(w.body)
        return w.body if attempt == 0 else w.fresh_body()

    def _options(self, w: Write, operation: str) -> dict[str, Any]:
        if w.verb == "delete":
            return {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", **w.options}
        options: dict[str, Any] = {"kind": OPTIONS_KINDS[operation], "apiVersion": "meta.k8s.io/v1"}
        if w.dry_run:
            options["dryRun"] = ["All"]
        if w.field_manager and w.manager_named:
            options["fieldManager"] = w.field_manager
        if w.field_validation:
            options["fieldValidation"] = w.field_validation
        return options

    @staticmethod
    def schema(rtype: ResourceType) -> Node | None:
        """The schema a real server holds for ``rtype`` (``None``: it has none)."""
        if rtype.builtin:
            return schemas.builtin(rtype.group, rtype.version, rtype.kind)
        return schemas.custom(rtype.schema)

    def _target(self, w: Write, name: str) -> fields.ApplyTarget:
        rtype = w.rtype
        return fields.ApplyTarget(
            w.field_manager,
            rtype.api_version,
            w.subresource,
            rtype.has_status,
            rtype.plural,
            rtype.group,
            name,
            self.schema(rtype),
        )

    def _typed(self, w: Write, body: dict[str, Any]) -> None:
        """A server-side apply's configuration must fit the kind's schema (else a 500, as real)."""
        schema = self.schema(w.rtype)
        problems = _typed_errors(schema, json.dumps(body)) if schema is not None else ()
        if problems:
            rtype, namespace = w.rtype, (body.get("metadata") or {}).get("namespace") or ""
            raise errors.typed_patch_failed(
                rtype.group, rtype.version, rtype.kind, namespace, w.name, list(problems)
            )

    def _structural(self, w: Write, old: dict[str, Any] | None, obj: dict[str, Any]) -> None:
        """Prune (non-apply writes), default and validate ``obj`` by its kind's schema. As with a
        real server's validation ratcheting, an update is not refused for what it left as it was."""
        rtype, schema = w.rtype, self.schema(w.rtype)
        if schema is None or w.from_controller:
            return
        if w.verb != "apply":
            dropped = structural.prune(obj, schema)
            if dropped and w.field_validation == "Strict":
                unknown = ", ".join(f'unknown field "{field}"' for field in dropped)
                raise errors.bad_request(
                    f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
                    f"strict decoding error: {unknown}"
                )
            if rtype.builtin:
                problems = structural.typed_errors(obj, schema)
                if problems:
                    raise errors.bad_request(
                        f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
                        f"{problems[0].lstrip('.')}"
                    )
        if not rtype.builtin:
            structural.default(obj, schema)
            causes = structural.validate(obj, schema)
            if causes and old is not None:
                before = set(structural.validate(old, schema))
                causes = [cause for cause in causes if cause not in before]
            if causes:
                raise errors.invalid_causes(rtype.kind, rtype.group, obj["metadata"].get("name", ""), causes)

    def _plan(self, w: Write, old: dict[str, Any] | None, body: Any) -> tuple[str, dict[str, Any] | None]:
        rtype = w.rtype
        if w.verb == "create":
            return "CREATE", self._new(w, body, None)
        if w.verb == "apply":
            if not isinstance(body, dict):
                raise errors.bad_request("apply patch must be an object")
            meta = body.setdefault("metadata", {})
            self._typed(w, body)
            if meta.get("name", w.name) != w.name:
                raise errors.bad_request(
                    f"the name of the object ({meta['name']}) does not match the name on the URL ({w.name})"
                )
            if old is None:
                if w.subresource:
                    raise errors.not_found(rtype.plural, rtype.group, w.name)
                applied = fields.apply(None, body, self._target(w, w.name), force=w.force, now=build.now())
                applied.update(apiVersion=body.get("apiVersion"), kind=body.get("kind"))
                applied["metadata"]["name"] = w.name
                return "CREATE", self._new(w, applied, applied["metadata"].get("managedFields"))
            wanted_rv = meta.get("resourceVersion")
            if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(rtype.plural, rtype.group, w.name)
            applied = fields.apply(old, body, self._target(w, w.name), force=w.force, now=build.now())
            managed = applied["metadata"].get("managedFields")
            return "UPDATE", self._next(w, old, applied, managed)
        if old is None:
            raise errors.not_found(rtype.plural, rtype.group, w.name)
        if w.verb == "delete":
            if rtype is catalog.NAMESPACES and w.name in PROTECTED_NAMESPACES:
                raise errors.forbidden(rtype.plural, rtype.group, w.name, "this namespace may not be deleted")
            self._check_preconditions(w, old, body)
            return "DELETE", None
        if w.verb == "update":
            return "UPDATE", self._next(w, old, body, None)
        if w.patch_type == patches.JSON_PATCH:
            patched = patches.json_patch(old, body)
        elif isinstance(body, dict) and w.patch_type == patches.STRATEGIC:
            patched = patches.strategic_merge(patches.clone(old), body, self.schema(rtype) or ANY)
        elif isinstance(body, dict):
            patched = patches.merge_patch(patches.clone(old), body)
        else:
            raise errors.bad_request("a merge patch must be a JSON object")
        return "UPDATE", self._next(w, old, patched, None)

    def _check_preconditions(self, w: Write, old: dict[str, Any], body: Any) -> None:
        wanted = (body.get("preconditions") or {}) if isinstance(body, dict) else {}
        meta = old["metadata"]
        for key, label, why in (
            ("uid", "UID", "deleted and then recreated"),
            ("resourceVersion", "ResourceVersion", "modified"),
        ):
            if wanted.get(key) and wanted[key] != meta.get(key):
                raise errors.precondition_failed(
                    w.rtype.kind,
                    w.rtype.group,
                    w.name,
                    f"the {label} in the precondition ({wanted[key]}) does not match the {label} in "
                    f"record ({meta.get(key)}). The object might have been {why}",
                )

    def _new(self, w: Write, body: Any, managed: list[Any] | None) -> dict[str, Any]:
        rtype = w.rtype
        obj = build.created(rtype, body, w.namespace)
        meta = obj["metadata"]
        if rtype.namespaced:
            namespace = self.store.get(catalog.NAMESPACES.storage, None, w.namespace or "")
            if namespace is None:
                raise errors.not_found("namespaces", "", w.namespace or "")
            if namespace["metadata"].get("deletionTimestamp"):
                why = (
                    f"unable to create new content in namespace {w.namespace} because it is being terminated"
                )
                raise errors.forbidden(rtype.plural, rtype.group, meta["name"], why)
            if rtype is catalog.PODS:
                why = podsecurity.refusal(namespace, obj.get("spec") or {}) or self._prioritize(obj)
                if why:
                    raise errors.forbidden(rtype.plural, rtype.group, meta["name"], why)
        if self.store.get(rtype.storage, w.namespace, meta["name"]) is not None:
            raise errors.already_exists(rtype.plural, rtype.group, meta["name"])
        if rtype.has_status:
            obj.pop("status", None)
            status = defaults.initial_status(rtype)
            if status is not None:
                obj["status"] = status
        self._finish(w, None, obj, managed)
        return obj

    def _prioritize(self, pod: dict[str, Any]) -> str:
        """The Priority admission plugin: a pod's priorityClassName must name an existing class,
        whose value becomes the pod's priority (``""``: admitted)."""
        spec = pod.setdefault("spec", {})
        name = spec.get("priorityClassName")
        if not name:
            return ""
        found = self.store.get(catalog.PRIORITY_CLASSES.storage, None, name)
        value = SYSTEM_PRIORITIES.get(name) if found is None else found.get("value", 0)
        if value is None:
            return f"no PriorityClass with name {name} was found"
        spec["priority"] = value
        spec.setdefault("preemptionPolicy", (found or {}).get("preemptionPolicy", "PreemptLowerPriority"))
        return ""

    def _next(self, w: Write, old: dict[str, Any], body: Any, managed: list[Any] | None) -> dict[str, Any]:
        obj = build.updated(w.rtype, old, body, w.subresource)
        self._finish(w, old, obj, managed)
        return obj

    def _finish(
        self, w: Write, old: dict[str, Any] | None, obj: dict[str, Any], managed: list[Any] | None
    ) -> None:
        """Defaults, kind-specific validation and managed fields, shared by creates and updates."""
        rtype, meta = w.rtype, obj["metadata"]
        self._structural(w, old, obj)
        if w.subresource != "status":
            defaults.apply_defaults(rtype, obj, old, self._allocate_ip)
            if rtype is catalog.DEPLOYMENTS:
                problem = build.deployment_problems(obj.get("spec") or {}, (old or {}).get("spec"))
                if problem:
                    raise errors.invalid(rtype.kind, rtype.group, meta["name"], *problem)
            if rtype in (catalog.VALIDATING_WEBHOOKS, catalog.MUTATING_WEBHOOKS):
                problems = configuration_problems(obj)
                if problems:
                    raise errors.invalid_causes(rtype.kind, rtype.group, meta["name"], problems)
            if rtype is catalog.CRDS:
                catalog.types_from_crd(obj)  # validates
                obj["status"] = build.crd_status(obj, (old or {}).get("status"))
        if w.verb == "apply":
            if managed:
                meta["managedFields"] = managed
            else:
                meta.pop("managedFields", None)
        else:
            manager = w.field_manager or "unknown"
            fields.record_update(
                old,
                obj,
                fields.ApplyTarget(
                    manager,
                    rtype.api_version,
                    w.subresource,
                    rtype.has_status,
                    rtype.plural,
                    rtype.group,
                    meta["name"],
                    self.schema(rtype),
                ),
                now=build.now(),
            )

    def _commit(self, w: Write, old: dict[str, Any] | None, new: dict[str, Any] | None) -> Outcome:
        rtype, storage = w.rtype, w.rtype.storage
        if new is None:
            assert old is not None
            return self._commit_delete(w, old)
        meta = new["metadata"]
        if old is not None:
            if rtype.generation:
                generation = old["metadata"].get("generation", 1)
                meta["generation"] = generation + build.desired_state_changed(rtype, old, new)
            if build.unchanged(old, new):
                return Outcome(200, self.render(rtype, old), old, False, False)
        status = 201 if old is None else 200
        if w.dry_run:
            return Outcome(status, self.render(rtype, new), new, False, True)
        if old is not None and meta.get("deletionTimestamp") and not meta.get("finalizers"):
            gone = self.store.remove(storage, new)
            return Outcome(200, self.render(rtype, gone), gone, True, True)
        stored = self.store.put(storage, new, "ADDED" if old is None else "MODIFIED")
        return Outcome(status, self.render(rtype, stored), stored, False, True)

    def _commit_delete(self, w: Write, old: dict[str, Any]) -> Outcome:
        rtype = w.rtype
        if rtype is catalog.NAMESPACES or old["metadata"].get("finalizers"):
            meta = {**old["metadata"], "deletionTimestamp": build.now(), "deletionGracePeriodSeconds": 0}
            pending = {**old, "metadata": meta}
            if rtype is catalog.NAMESPACES:
                pending["status"] = {**(old.get("status") or {}), "phase": "Terminating"}
            if not w.dry_run:
                pending = self.store.put(rtype.storage, pending, "MODIFIED")
            return Outcome(200, self.render(rtype, pending), pending, False, True)
        gone = old if w.dry_run else self.store.remove(rtype.storage, old)
        body = self.render(rtype, gone) if rtype.returns_deleted else build.delete_status(rtype, gone)
        return Outcome(200, body, gone, True, True)

    async def _after(self, w: Write, old: dict[str, Any] | None, outcome: Outcome) -> None:
        """Consequences of a committed change: CRDs served, namespaces emptied, controllers told."""
        rtype, obj = w.rtype, outcome.obj
        assert obj is not None
        if rtype in (catalog.VALIDATING_WEBHOOKS, catalog.MUTATING_WEBHOOKS):
            self.admission.invalidate()
        elif rtype is catalog.CRDS:
            if outcome.removed:
                self._drop_custom_resources(obj)
            elif not obj["metadata"].get("deletionTimestamp"):
                self.catalog.register(catalog.types_from_crd(obj))
        elif rtype is catalog.NAMESPACES and obj["metadata"].get("deletionTimestamp") and not outcome.removed:
            await self._empty_namespace(obj["metadata"]["name"])
        if rtype.namespaced and outcome.removed:
            self._finish_namespace(obj["metadata"].get("namespace") or "")
        if self.observer is not None and not w.from_controller:
            try:
                await self.observer(w, old, outcome)
            except Exception:
                logger.exception("an emulated controller failed after a write to %s", rtype.storage)

    def _drop_custom_resources(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        storage = errors.qualified(spec["names"]["plural"], spec["group"])
        for obj in self.store.objects(storage):
            self.store.remove(storage, obj)
        self.catalog.unregister(spec["group"], spec["names"]["plural"])

    def type_of_storage(self, storage: str) -> ResourceType | None:
        """A served type for a storage key (any version will do: they share objects)."""
        return next((r for r in self.catalog if r.storage == storage), None)

    async def _empty_namespace(self, namespace: str) -> None:
        """What the namespace controller does: delete everything in it, then the namespace."""
        for storage, obj in list(self.store.in_namespace(namespace)):
            rtype = self.type_of_storage(storage)
            if rtype is None or obj["metadata"].get("deletionTimestamp"):
                continue
            delete = Write("delete", rtype, namespace, obj["metadata"]["name"], user=NAMESPACE_CONTROLLER)
            try:
                await self.write(delete)
            except KubernetesError as exc:
                logger.info("namespace %s: could not delete %s: %s", namespace, storage, exc.message)
        self._finish_namespace(namespace)

    def _finish_namespace(self, namespace: str) -> None:
        obj = self.store.get(catalog.NAMESPACES.storage, None, namespace)
        if obj is None or not obj["metadata"].get("deletionTimestamp") or obj["metadata"].get("finalizers"):
            return
        if next(self.store.in_namespace(namespace), None) is None:
            self.store.remove(catalog.NAMESPACES.storage, obj)
