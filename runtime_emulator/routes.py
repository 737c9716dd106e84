"""URL and query parsing for the Kubernetes REST layout.

kmock's own parser reads ``/api/v1/namespaces/<name>`` as a namespace prefix without a resource
and crashes on ``POST /api/v1/namespaces``; this one treats ``namespaces`` the way the apiserver
routes it (``/namespaces/<ns>/<plural>...`` versus the ``namespaces`` resource itself, including
its ``status`` subresource).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime_emulator import errors

TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True, slots=True)
class Route:
    """A parsed request path; ``plural`` is empty for discovery and other non-resource paths."""

    path: str
    group: str = ""
    version: str = ""
    plural: str = ""
    namespace: str | None = None
    name: str = ""
    subresource: str = ""

    @property
    def is_resource(self) -> bool:
        """Whether the path addresses a resource (not discovery or a health endpoint)."""
        return bool(self.plural)

    @property
    def label(self) -> str:
        """How request counts name this route: ``deployments.apps``, ``pods/status``, or the path."""
        if not self.plural:
            return self.path
        resource = errors.qualified(self.plural, self.group)
        return f"{resource}/{self.subresource}" if self.subresource else resource


def parse(path: str) -> Route:
    """Split a request path into group/version/resource/namespace/name/subresource."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return Route(path)
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in NAMESPACE_SUBRESOURCES:
        namespace, rest = rest[1], rest[2:]
    plural, name, sub = rest[0], rest[1] if len(rest) > 1 else "", "/".join(rest[2:])
    return Route(path, group, version, plural, namespace, name, sub)


def parse_bool(query: Mapping[str, str], key: str) -> bool:
    """``strconv.ParseBool``, which is what the apiserver uses for query flags."""
    value = query.get(key)
    if value is None or value == "":
        return False
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise errors.bad_request(f"invalid boolean value for {key}: {value!r}")


def verb(method: str, route: Route, query: Mapping[str, str], content_type: str) -> str:
    """The Kubernetes verb of a request (``discovery`` for non-resource paths)."""
    if not route.is_resource:
        return "discovery"
    if method == "GET":
        if query.get("watch") in TRUE:
            return "watch"
        return "get" if route.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "apply" if content_type.startswith("application/apply-patch") else "patch"
    if method == "DELETE":
        return "delete" if route.name else "deletecollection"
    return method.lower()
