"""Kubernetes ``Status`` errors.

Every failure leaves the emulator as the ``Status`` body a real API server would send, so the
``kubernetes`` client raises ``ApiException`` with the same ``status``, ``reason`` and message
text and callers can branch on them exactly as they would against a real cluster.
"""

from __future__ import annotations

from typing import Any

from kmock import KubernetesError


def qualified(plural: str, group: str) -> str:
    """``deployments.apps`` / ``secrets``: how Kubernetes names a resource in messages."""
    return f"{plural}.{group}" if group else plural


def _details(name: str, plural: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def status_body(error: KubernetesError) -> dict[str, Any]:
    """Render an error as a ``Status`` object."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": error.message or "",
        "reason": error.reason or "",
        "code": error.status,
    }
    if not error.reason:
        del body["reason"]  # (a real server leaves it out when it has none)
    if error.details is not None:
        body["details"] = error.details
    return body


def not_found(plural: str, group: str, name: str) -> KubernetesError:
    return KubernetesError(
        404, "NotFound", f'{qualified(plural, group)} "{name}" not found', _details(name, plural, group)
    )


def unknown_resource() -> KubernetesError:
    return KubernetesError(404, "NotFound", "the server could not find the requested resource", {})


class PageNotFound(KubernetesError):
    """A path no API group answers (an unknown group, or a CRD group's unknown version or resource):
    a real server's plain-text ``404 page not found``, not a ``Status``."""


def page_not_found() -> KubernetesError:
    return PageNotFound(404, "NotFound", "404 page not found", None)


def already_exists(plural: str, group: str, name: str) -> KubernetesError:
    return KubernetesError(
        409,
        "AlreadyExists",
        f'{qualified(plural, group)} "{name}" already exists',
        _details(name, plural, group),
    )


def conflict(plural: str, group: str, name: str, why: str = "") -> KubernetesError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return KubernetesError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
        _details(name, plural, group),
    )


def apply_conflict(plural: str, group: str, name: str, conflicts: dict[str, list[str]]) -> KubernetesError:
    """409 for server-side apply, worded like the apiserver's field manager: ``conflicts`` maps
    each manager as conflicts name it (``"kubectl-edit" using v1`` for an Update manager) to the
    paths it owns."""
    count = sum(len(fields) for fields in conflicts.values())
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {manager}", "field": field}
        for manager, fields in sorted(conflicts.items())
        for field in fields
    ]
    parts = []
    for manager, fields in sorted(conflicts.items()):
        if len(fields) == 1:
            parts.append(f"conflict with {manager}: {fields[0]}")
        else:
            parts.append(f"conflicts with {manager}:" + "".join(f"\n- {field}" for field in fields))
    plural_s = "" if count == 1 else "s"
    text = f"Apply failed with {count} conflict{plural_s}: " + "\n".join(parts)
    return KubernetesError(409, "Conflict", text, {"causes": causes})


def precondition_failed(kind: str, group: str, name: str, why: str) -> KubernetesError:
    """409 for a delete whose preconditions the stored object does not meet (named by its kind)."""
    details = {"name": name, "kind": kind} | ({"group": group} if group else {})
    kind_name = f"{kind}.{group}" if group else kind
    return KubernetesError(
        409, "Conflict", f'Operation cannot be fulfilled on {kind_name} "{name}": {why}', details
    )


def typed_patch_failed(
    group: str, version: str, kind: str, namespace: str, name: str, problems: list[str]
) -> KubernetesError:
    """500 for an applied configuration the kind's schema cannot type (as a real server answers)."""
    where = f"({namespace}/{name}; {group}/{version}, Kind={kind})"
    found = problems[0] if len(problems) == 1 else "errors:\n" + "\n".join(f"  {p}" for p in problems)
    return KubernetesError(500, "", f"failed to create typed patch object {where}: {found}", None)


def invalid_causes(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> KubernetesError:
    """422 with one cause per refused field: ``(reason, field, message)``."""
    kind_name = f"{kind}.{group}" if group else kind
    shown = [f"{field}: {message}" for _, field, message in causes]
    text = shown[0] if len(shown) == 1 else "[" + ", ".join(shown) + "]"
    details: dict[str, Any] = {"name": name} if name else {}
    details["kind"] = kind
    if group:
        details["group"] = group
    details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
    return KubernetesError(422, "Invalid", f'{kind_name} "{name}" is invalid: {text}', details)


def invalid(kind: str, group: str, name: str, field: str, why: str) -> KubernetesError:
    kind_name = f"{kind}.{group}" if group else kind
    details = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": "FieldValueInvalid", "message": why, "field": field}],
    }
    if group:
        details["group"] = group
    return KubernetesError(422, "Invalid", f'{kind_name} "{name}" is invalid: {field}: {why}', details)


def unprocessable(message: str) -> KubernetesError:
    return KubernetesError(422, "Invalid", message, None)


def bad_request(message: str) -> KubernetesError:
    return KubernetesError(400, "BadRequest", message, None)


def forbidden(plural: str, group: str, name: str, why: str) -> KubernetesError:
    text = f'{qualified(plural, group)} "{name}" is forbidden: {why}'
    return KubernetesError(403, "Forbidden", text, _details(name, plural, group))


def method_not_allowed(method: str) -> KubernetesError:
    return KubernetesError(
        405,
        "MethodNotAllowed",
        f"the server does not allow this method on the requested resource ({method})",
        None,
    )


def unsupported_media_type(content_type: str, *, strategic: bool = True) -> KubernetesError:
    """415; a custom resource (``strategic=False``) takes no strategic merge patch."""
    accepted = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    text = f"the body of the request was in an unknown format - accepted media types include: {accepted}"
    if strategic:
        text += f", application/strategic-merge-patch+json (got {content_type!r})"
    return KubernetesError(415, "UnsupportedMediaType", text, None)


def unauthorized() -> KubernetesError:
    return KubernetesError(401, "Unauthorized", "Unauthorized", None)


def internal_error(message: str) -> KubernetesError:
    return KubernetesError(
        500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]}
    )


def too_many_requests(retry_after: int) -> KubernetesError:
    return KubernetesError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        {"retryAfterSeconds": retry_after},
    )


def expired(message: str) -> KubernetesError:
    return KubernetesError(410, "Expired", message, None)
