"""Requests as the contract cases make them: through the ``kubernetes`` client's ``ApiClient``,
answering ``(status, body)`` instead of raising, so a case asserts on a 409 or a 500 as plainly as
on a 200. Paths are built from ``apiVersion``, plural and namespace, as ``fleet.k8s`` builds them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass
class Answer:
    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        return self.body.get("message", "") if isinstance(self.body, dict) else str(self.body)

    @property
    def reason(self) -> str:
        return self.body.get("reason", "") if isinstance(self.body, dict) else ""

    @property
    def causes(self) -> set[tuple[str, str]]:
        """``(field, reason)`` of each cause of a failure ``Status``."""
        details = (self.body.get("details") or {}) if isinstance(self.body, dict) else {}
        return {(c.get("field", ""), c.get("reason", "")) for c in details.get("causes") or ()}


def path(api_version: str, plural: str, namespace: str | None = None, name: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base


class Client:
    """Plain requests to one API server as its administrator."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.api = api

    def call(
        self,
        method: str,
        where: str,
        body: Any = None,
        *,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Answer:
        try:
            response = self.api.call_api(
                where,
                method,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
            )
        except ApiException as exc:
            return Answer(exc.status, _decode(exc.body))
        return Answer(response.status, _decode(response.data))

    # -- verbs ------------------------------------------------------------------------------------

    def get(self, where: str) -> Answer:
        return self.call("GET", where)

    def list(self, where: str, **query: str) -> Answer:
        return self.call("GET", where, query=list(query.items()))

    def create(self, where: str, body: dict[str, Any], **query: str) -> Answer:
        return self.call("POST", where, body, query=list(query.items()))

    def put(self, where: str, body: dict[str, Any]) -> Answer:
        return self.call("PUT", where, body)

    def merge(self, where: str, patch: dict[str, Any], *, manager: str | None = None) -> Answer:
        query = [("fieldManager", manager)] if manager else []
        return self.call("PATCH", where, patch, query=query, content_type=MERGE)

    def json_patch(self, where: str, operations: list[dict[str, Any]]) -> Answer:
        return self.call("PATCH", where, operations, content_type=JSON_PATCH)

    def apply(
        self, where: str, doc: dict[str, Any], *, manager: str | None, force: bool = False, **query: str
    ) -> Answer:
        params = [("fieldManager", manager)] if manager else []
        if force:
            params.append(("force", "true"))
        params += list(query.items())
        return self.call("PATCH", where, doc, query=params, content_type=APPLY)

    def delete(self, where: str, body: dict[str, Any] | None = None) -> Answer:
        return self.call("DELETE", where, body)


def _decode(data: bytes | str | None) -> Any:
    if not data:
        return {}
    try:
        return json.loads(data)
    except ValueError:
        return data.decode(errors="replace") if isinstance(data, bytes) else data


def managers(obj: dict[str, Any]) -> set[tuple[str, str, str]]:
    """``(manager, operation, subresource)`` of every managedFields entry."""
    return {
        (e["manager"], e["operation"], e.get("subresource", ""))
        for e in obj["metadata"].get("managedFields") or ()
    }


def fields_of(obj: dict[str, Any], manager: str, operation: str, subresource: str = "") -> dict[str, Any]:
    """The ``fieldsV1`` of one managedFields entry (``{}`` when there is none)."""
    for entry in obj["metadata"].get("managedFields") or ():
        if (entry["manager"], entry["operation"], entry.get("subresource", "")) == (
            manager,
            operation,
            subresource,
        ):
            return entry["fieldsV1"]
    return {}
