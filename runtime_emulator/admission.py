"""Dynamic admission: calling the webhooks of stored (Validating|Mutating)WebhookConfigurations.

Behaves like the apiserver's admission chain: matching CREATE/UPDATE/DELETE requests (rules with
``*`` wildcards and ``<resource>/status``-style subresources, scope, ``objectSelector`` and
``namespaceSelector``) are sent an ``admission.k8s.io/v1`` ``AdmissionReview`` over HTTPS before
the object is persisted; mutating webhooks run first, one after another, and may return a JSON
patch; validating webhooks run concurrently. ``failurePolicy`` decides whether a failed call
(connection refused, TLS error, timeout after ``timeoutSeconds``, bad response) rejects the write
(``Fail``, the default) or is ignored (``Ignore``); ``allowed: false`` always rejects it with the
webhook's message, worded like the apiserver's. Webhook configurations themselves are never
sent to webhooks, as on a real server.

There is no cluster network: a ``clientConfig.service`` is reached through the emulator's
``service_endpoints`` mapping ``(namespace, name) -> (host, port)``, while TLS still verifies the
certificate against ``caBundle`` for ``<service>.<namespace>.svc`` (SNI and hostname check).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import ssl
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jsonpatch
from kmock import KubernetesError

from runtime_emulator import catalog, selectors
from runtime_emulator.catalog import Catalog, ResourceType
from runtime_emulator.selectors import Requirement
from runtime_emulator.store import Store

CALL_LOG_SIZE = 1000
Endpoints = dict[tuple[str, str], tuple[str, int]]


@dataclass(frozen=True, slots=True)
class UserInfo:
    """The authenticated user a request runs as (sent to webhooks as ``userInfo``)."""

    username: str
    groups: tuple[str, ...] = ("system:authenticated",)

    def render(self) -> dict[str, Any]:
        """The ``userInfo`` of an AdmissionReview."""
        return {"username": self.username, "groups": list(self.groups)}


@dataclass(slots=True)
class AdmissionRequest:
    """One write, as the admission chain sees it."""

    operation: str  # CREATE | UPDATE | DELETE
    rtype: ResourceType
    subresource: str
    namespace: str | None
    name: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    user: UserInfo
    dry_run: bool
    options: dict[str, Any]


@dataclass(slots=True)
class WebhookCall:
    """A record of one webhook call, for assertions."""

    configuration: str
    webhook: str
    mutating: bool
    url: str
    review: dict[str, Any]
    allowed: bool | None = None
    message: str = ""
    error: str | None = None
    duration: float = 0.0

    @property
    def request(self) -> dict[str, Any]:
        """The AdmissionReview ``request`` that was sent."""
        return self.review["request"]


class WebhookTransport:
    """One pooled HTTP session and one SSL context per CA bundle, shared by a host's emulators."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[bytes, ssl.SSLContext] = {}

    def session(self) -> aiohttp.ClientSession:
        """The shared session, created on first use (it must be created on the host's loop)."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=512, limit_per_host=32)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def ssl_context(self, ca_bundle: bytes) -> ssl.SSLContext:
        """A client context trusting ``ca_bundle`` (the system roots when empty), cached per bundle."""
        context = self._contexts.get(ca_bundle)
        if context is None:
            context = ssl.create_default_context(cadata=ca_bundle.decode() if ca_bundle else None)
            self._contexts[ca_bundle] = context
        return context

    async def close(self) -> None:
        """Close the pooled session (host shutdown)."""
        if self._session is not None:
            await self._session.close()


class _CallFailed(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Rule:
    groups: frozenset[str]
    versions: frozenset[str]
    resources: frozenset[str]
    operations: frozenset[str]
    scope: str

    def matches(self, request: AdmissionRequest, rtype: ResourceType) -> bool:
        """Whether this rule covers the request's operation and subresource, and ``rtype``'s
        group, version, resource and scope (the request's own type, or an equivalent one)."""
        sub = request.subresource
        if "*" not in self.operations and request.operation not in self.operations:
            return False
        if "*" not in self.groups and rtype.group not in self.groups:
            return False
        if "*" not in self.versions and rtype.version not in self.versions:
            return False
        if self.scope != "*" and self.scope != ("Namespaced" if rtype.namespaced else "Cluster"):
            return False
        wanted = f"{rtype.plural}/{sub}" if sub else rtype.plural
        patterns = {wanted, "*/*", f"{rtype.plural}/*", f"*/{sub}"} if sub else {wanted, "*"}
        return not patterns.isdisjoint(self.resources)


@dataclass(frozen=True, slots=True)
class _Webhook:
    configuration: str
    name: str
    mutating: bool
    rules: tuple[_Rule, ...]
    failure_policy: str
    match_policy: str
    timeout: float
    object_selector: tuple[Requirement, ...]
    namespace_selector: tuple[Requirement, ...]
    service: tuple[str, str, str, int] | None  # namespace, name, path, port
    url: str
    ca_bundle: bytes
    problem: str = field(default="")

    def display_url(self) -> str:
        """The URL the apiserver would report in errors (the ``.svc`` name, not the local endpoint)."""
        if self.service is None:
            return self.url
        namespace, name, path, port = self.service
        return f"https://{name}.{namespace}.svc:{port}{path}"


def _compile(config: Mapping[str, Any], mutating: bool) -> list[_Webhook]:
    hooks = []
    for hook in config.get("webhooks") or ():
        problem = ""
        client = hook.get("clientConfig") or {}
        try:
            ca_bundle = base64.b64decode(client.get("caBundle") or "", validate=True)
        except (binascii.Error, ValueError):
            ca_bundle, problem = b"", "caBundle is not valid base64"
        svc = client.get("service")
        service = None
        if svc:
            path = svc.get("path") or "/"
            service = (svc.get("namespace", ""), svc.get("name", ""), path, int(svc.get("port") or 443))
        try:
            object_selector = selectors.from_label_selector(hook.get("objectSelector"))
            namespace_selector = selectors.from_label_selector(hook.get("namespaceSelector"))
        except ValueError as exc:
            object_selector, namespace_selector, problem = (), (), str(exc)
        rules = tuple(
            _Rule(
                frozenset(rule.get("apiGroups") or ()),
                frozenset(rule.get("apiVersions") or ()),
                frozenset(rule.get("resources") or ()),
                frozenset(rule.get("operations") or ()),
                rule.get("scope") or "*",
            )
            for rule in hook.get("rules") or ()
        )
        hooks.append(
            _Webhook(
                config["metadata"]["name"],
                hook.get("name", ""),
                mutating,
                rules,
                hook.get("failurePolicy") or "Fail",
                hook.get("matchPolicy") or "Equivalent",
                float(hook.get("timeoutSeconds") or 10),
                object_selector,
                namespace_selector,
                service,
                client.get("url") or "",
                ca_bundle,
                problem,
            )
        )
    return hooks


class Admission:
    """The admission chain of one emulator."""

    __slots__ = ("_calls", "_catalog", "_endpoints", "_hooks", "_store", "_transport", "store_delay")

    def __init__(
        self, store: Store, endpoints: Endpoints, transport: WebhookTransport, types: Catalog | None = None
    ) -> None:
        # Seconds between the validating webhooks' answers and the write being stored: a real API
        # server stores a change some time after its webhooks saw it (other webhooks, etcd).
        self.store_delay = 0.0
        self._store = store
        self._catalog = types
        self._endpoints = endpoints
        self._transport = transport
        self._hooks: tuple[list[_Webhook], list[_Webhook]] | None = None
        self._calls: deque[WebhookCall] | None = None

    @property
    def calls(self) -> list[WebhookCall]:
        """Recorded webhook calls, oldest first."""
        return list(self._calls or ())

    def invalidate(self) -> None:
        """Forget the compiled webhooks (a webhook configuration was written)."""
        self._hooks = None

    def _compiled(self) -> tuple[list[_Webhook], list[_Webhook]]:
        if self._hooks is None:
            self._hooks = (
                [
                    h
                    for c in self._store.objects(catalog.MUTATING_WEBHOOKS.storage)
                    for h in _compile(c, True)
                ],
                [
                    h
                    for c in self._store.objects(catalog.VALIDATING_WEBHOOKS.storage)
                    for h in _compile(c, False)
                ],
            )
        return self._hooks

    def _matched(self, hook: _Webhook, request: AdmissionRequest) -> ResourceType | None:
        """The type the webhook reviews the request as (``None``: not called). With
        ``matchPolicy: Equivalent`` (the default) a rule for another version of the same resource
        matches too, and the webhook gets the object in that version."""
        if any(rule.matches(request, request.rtype) for rule in hook.rules):
            return request.rtype
        if hook.match_policy == "Equivalent" and self._catalog is not None:
            # (the other versions of the resource only, then in order: sorting every served type
            # for each write and webhook was 3 % of the emulator's CPU of a first reconcile)
            rtype = request.rtype
            equivalent = [
                other
                for other in self._catalog
                if other.plural == rtype.plural and other is not rtype and other.storage == rtype.storage
            ]
            for other in sorted(equivalent, key=lambda r: catalog.version_priority(r.version)):
                if any(rule.matches(request, other) for rule in hook.rules):
                    return other
        return None

    def _applies(self, hook: _Webhook, request: AdmissionRequest) -> ResourceType | None:
        rtype = self._matched(hook, request)
        if rtype is None:
            return None
        if hook.object_selector:
            labels = [(o.get("metadata") or {}).get("labels") for o in (request.obj, request.old) if o]
            if not any(selectors.labels_match(hook.object_selector, lab) for lab in labels or [{}]):
                return None
        if hook.namespace_selector:
            if request.rtype is catalog.NAMESPACES:
                ns_labels = ((request.obj or request.old or {}).get("metadata") or {}).get("labels")
            elif request.rtype.namespaced:
                namespace = self._store.get(catalog.NAMESPACES.storage, None, request.namespace or "")
                ns_labels = ((namespace or {}).get("metadata") or {}).get("labels")
            else:
                return rtype
            if not selectors.labels_match(hook.namespace_selector, ns_labels):
                return None
        return rtype

    async def review(self, request: AdmissionRequest) -> dict[str, Any] | None:
        """Run the chain; returns the (possibly mutated) object or raises the rejection."""
        if request.rtype in (catalog.VALIDATING_WEBHOOKS, catalog.MUTATING_WEBHOOKS):
            return request.obj
        mutating, validating = self._compiled()
        obj = request.obj
        if not mutating and not validating:
            return obj
        for hook in mutating:
            as_type = self._applies(hook, request)
            if as_type is not None:
                obj = await self._call(hook, request, obj, as_type)
        matching = [(hook, as_type) for hook in validating if (as_type := self._applies(hook, request))]
        results = await asyncio.gather(
            *(self._call(h, request, obj, as_type) for h, as_type in matching), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if matching and self.store_delay > 0 and not request.dry_run:
            await asyncio.sleep(self.store_delay)
        return obj

    def _review(
        self, request: AdmissionRequest, obj: dict[str, Any] | None, as_type: ResourceType
    ) -> dict[str, Any]:
        asked = request.rtype
        body: dict[str, Any] = {
            "uid": str(uuid.uuid4()),
            "kind": _kind(as_type),
            "resource": _resource(as_type),
            "requestKind": _kind(asked),
            "requestResource": _resource(asked),
            "operation": request.operation,
            "userInfo": request.user.render(),
            "object": _as_version(obj, as_type),
            "oldObject": _as_version(request.old, as_type),
            "dryRun": request.dry_run,
            "options": request.options,
        }
        if request.subresource:
            body["subResource"] = body["requestSubResource"] = request.subresource
        if request.name:
            body["name"] = request.name
        if request.namespace:
            body["namespace"] = request.namespace
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}

    async def _call(
        self, hook: _Webhook, request: AdmissionRequest, obj: dict[str, Any] | None, as_type: ResourceType
    ) -> dict[str, Any] | None:
        review = self._review(request, obj, as_type)
        record = WebhookCall(hook.configuration, hook.name, hook.mutating, hook.display_url(), review)
        if self._calls is None:
            self._calls = deque(maxlen=CALL_LOG_SIZE)
        self._calls.append(record)
        started = time.monotonic()
        try:
            response = await self._post(hook, review)
            if not response.get("allowed"):
                status = response.get("status") or {}
                record.allowed, record.message = False, status.get("message") or status.get("reason") or ""
                raise _denied(hook.name, status)
            record.allowed = True
            if hook.mutating and response.get("patch"):
                operations = json.loads(base64.b64decode(response["patch"]))
                obj = jsonpatch.apply_patch(obj, operations, in_place=False)
        except _CallFailed as exc:
            record.error = str(exc)
            if hook.failure_policy != "Ignore":
                raise KubernetesError(
                    500,
                    "InternalError",
                    f'Internal error occurred: failed calling webhook "{hook.name}": {exc}',
                    {"causes": [{"message": f'failed calling webhook "{hook.name}": {exc}'}]},
                ) from exc
        except (ValueError, jsonpatch.JsonPatchException) as exc:
            record.error = f"invalid patch from webhook: {exc}"
            raise KubernetesError(
                500, "InternalError", f"Internal error occurred: {record.error}", None
            ) from exc
        finally:
            record.duration = time.monotonic() - started
        return obj

    async def _post(self, hook: _Webhook, review: dict[str, Any]) -> dict[str, Any]:
        timeout = int(hook.timeout)
        shown = f'Post "{hook.display_url()}?timeout={timeout}s"'
        if hook.problem:
            raise _CallFailed(f"failed to call webhook: {hook.problem}")
        server_hostname = None
        headers: dict[str, str] = {}
        if hook.service is not None:
            namespace, name, path, port = hook.service
            endpoint = self._endpoints.get((namespace, name))
            if endpoint is None:
                raise _CallFailed(
                    f'failed to call webhook: {shown}: no endpoints available for service "{name}"'
                )
            url = f"https://{endpoint[0]}:{endpoint[1]}{path}"
            server_hostname = f"{name}.{namespace}.svc"
            headers["Host"] = f"{server_hostname}:{port}"
        else:
            url = hook.url
        try:
            context = self._transport.ssl_context(hook.ca_bundle)
            async with self._transport.session().post(
                url,
                params={"timeout": f"{timeout}s"},
                json=review,
                ssl=context,
                server_hostname=server_hostname,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=hook.timeout),
            ) as response:
                raw = await response.read()
                if response.status != 200:
                    raise _CallFailed(
                        f"failed to call webhook: the server responded with status {response.status}"
                    )
        except TimeoutError:
            raise _CallFailed(f"failed to call webhook: {shown}: context deadline exceeded") from None
        except aiohttp.ClientConnectorError as exc:
            why = "connection refused" if isinstance(exc.os_error, ConnectionRefusedError) else exc.os_error
            raise _CallFailed(
                f"failed to call webhook: {shown}: dial tcp {exc.host}:{exc.port}: connect: {why}"
            ) from exc
        except (aiohttp.ClientError, ssl.SSLError, OSError) as exc:
            raise _CallFailed(f"failed to call webhook: {shown}: {exc}") from exc
        return _parse_response(raw, review["request"]["uid"])


_CHOICES = {
    "sideEffects": ("None", "NoneOnDryRun"),
    "failurePolicy": ("Fail", "Ignore"),
    "matchPolicy": ("Equivalent", "Exact"),
    "reinvocationPolicy": ("IfNeeded", "Never"),
}


def configuration_problems(config: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(reason, field, message)`` of what admissionregistration.k8s.io/v1 refuses in a webhook
    configuration (the fields the emulator relies on)."""
    found = []
    for index, hook in enumerate(config.get("webhooks") or ()):
        where = f"webhooks[{index}]"
        for key, supported in _CHOICES.items():
            value = hook.get(key)
            if key == "sideEffects" and value is None:
                found.append(("FieldValueRequired", f"{where}.{key}", "Required value"))
            elif value is not None and value not in supported:
                choices = ", ".join(f'"{choice}"' for choice in supported)
                why = f'Unsupported value: "{value}": supported values: {choices}'
                found.append(("FieldValueNotSupported", f"{where}.{key}", why))
        timeout = hook.get("timeoutSeconds")
        if timeout is not None and not 1 <= timeout <= 30:
            why = f"Invalid value: {timeout}: the timeout value must be between 1 and 30 seconds"
            found.append(("FieldValueInvalid", f"{where}.timeoutSeconds", why))
        if not hook.get("admissionReviewVersions"):
            why = "Required value: must specify one of v1, v1beta1"
            found.append(("FieldValueRequired", f"{where}.admissionReviewVersions", why))
    return found


def _kind(rtype: ResourceType) -> dict[str, str]:
    return {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}


def _resource(rtype: ResourceType) -> dict[str, str]:
    return {"group": rtype.group, "version": rtype.version, "resource": rtype.plural}


def _as_version(obj: dict[str, Any] | None, rtype: ResourceType) -> dict[str, Any] | None:
    """An object as ``rtype``'s version serves it (custom resource versions share a schema here)."""
    if obj is None or obj.get("apiVersion") == rtype.api_version:
        return obj
    return {**obj, "apiVersion": rtype.api_version}


def _parse_response(raw: bytes, uid: str) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise _CallFailed(f"failed to call webhook: cannot decode the response: {exc}") from exc
    if not isinstance(body, dict) or body.get("kind") != "AdmissionReview" or "response" not in body:
        raise _CallFailed("expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview")
    response = body["response"]
    if response.get("uid") != uid:
        raise _CallFailed(f'expected response.uid="{uid}", got "{response.get("uid")}"')
    return response


def _denied(webhook: str, status: Mapping[str, Any]) -> KubernetesError:
    code = int(status.get("code") or 400)
    message = status.get("message") or status.get("reason") or ""
    text = f'admission webhook "{webhook}" denied the request'
    text = f"{text}: {message}" if message else f"{text} without explanation"
    return KubernetesError(max(code, 400), status.get("reason") or "", text, None)
