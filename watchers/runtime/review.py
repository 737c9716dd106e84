"""AdmissionReview parsing, change detection and the WatchEvent wire format (no I/O).

Everything here is a pure function of its input so the upstream behaviour matrix (operation x
sub-resource x what changed) can be tested without sockets, and so the HTTP layer cannot drift
from it. The rules and messages mirror Kyma's Go runtime-watcher because the control plane and
operators grep for them; where upstream silently accepts garbage (an empty 200), we reject it
with :class:`ReviewError` and the HTTP layer answers 4xx.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

REVIEW_KIND = "AdmissionReview"
REVIEW_API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
STATUS_SUBRESOURCE = "status"

KCP_SUCCEEDED = "kcp request succeeded"
KCP_FAILED = "kcp request failed"
# The API server decodes objects nested at most this deep (apimachinery's JSON limit), so a review
# may carry an object that deep; Python's json parser stops near 1,000 levels (its recursion limit).
MAX_REVIEW_DEPTH = 10_000


class ReviewError(ValueError):
    """The request body is not an AdmissionReview we can answer; the message says why."""


@dataclass(frozen=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    def __str__(self) -> str:
        # Go's GroupVersionKind.String(): "apps/v1, Kind=Deployment", "/v1, Kind=Pod" for core.
        return f"{self.group}/{self.version}, Kind={self.kind}"

    @classmethod
    def from_api_version(cls, api_version: str, kind: str) -> GroupVersionKind:
        """Split ``apiVersion`` the way apimachinery's ``FromAPIVersionAndKind`` does.

        ``v1`` is the core group, ``apps/v1`` is group ``apps``; an unparsable value (two or more
        slashes) keeps only the kind, like upstream.
        """
        if api_version in ("", "/"):
            return cls("", "", kind)
        slashes = api_version.count("/")
        if slashes == 0:
            return cls("", api_version, kind)
        if slashes == 1:
            group, _, version = api_version.partition("/")
            return cls(group, version, kind)
        return cls("", "", kind)

    @classmethod
    def from_dict(cls, value: Any) -> GroupVersionKind:
        if not isinstance(value, dict):
            return cls("", "", "")
        return cls(_text(value.get("group")), _text(value.get("version")), _text(value.get("kind")))


@dataclass(frozen=True)
class Change:
    """Which change of the object the webhook saw, so the control plane can tell when the API
    server has stored it (a validating webhook is called *before* the write is stored).

    ``uid`` is the object's, ``old_resource_version`` the stored version the change starts from
    (UPDATE, DELETE; empty on CREATE). The change is stored once the object's resourceVersion
    moved past it, or (CREATE) the object exists, or (DELETE) it is gone.
    """

    operation: str
    uid: str
    old_resource_version: str

    def to_dict(self) -> dict[str, str]:
        body = {"operation": self.operation, "uid": self.uid}
        if self.old_resource_version:
            body["oldResourceVersion"] = self.old_resource_version
        return body

    @classmethod
    def of(cls, request: AdmissionRequest) -> Change:
        source = request.obj if request.operation == "CREATE" else request.old_obj
        metadata = (source or {}).get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        old = "" if request.operation == "CREATE" else _text(metadata.get("resourceVersion"))
        return cls(request.operation, _text(metadata.get("uid")), old)


@dataclass(frozen=True)
class WatchEvent:
    """What the listener receives: which object changed, and (beyond upstream) which change.

    Upstream's part is byte-compatible with its ``listenerTypes.WatchEvent``: ``Namespace`` and
    ``Name`` are capitalised because Go's ``types.NamespacedName`` has no JSON tags. The optional
    ``change`` comes last; upstream's listener (Go's ``encoding/json``) ignores it, ours uses it
    to start the reconcile at once instead of after a fixed delay.
    """

    namespace: str
    name: str
    gvk: GroupVersionKind
    change: Change | None = None

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "watched": {"Namespace": self.namespace, "Name": self.name},
            "watchedGvk": {"group": self.gvk.group, "version": self.gvk.version, "kind": self.gvk.kind},
        }
        if self.change is not None:
            body["change"] = self.change.to_dict()
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def for_object(cls, obj: dict[str, Any], change: Change | None = None) -> WatchEvent:
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        gvk = GroupVersionKind.from_api_version(_text(obj.get("apiVersion")), _text(obj.get("kind")))
        return cls(_text(metadata.get("namespace")), _text(metadata.get("name")), gvk, change)


@dataclass(frozen=True)
class AdmissionRequest:
    """The parts of ``AdmissionReview.request`` the watcher looks at."""

    api_version: str
    uid: str
    operation: str
    kind: GroupVersionKind
    sub_resource: str
    namespace: str
    name: str
    obj: dict[str, Any] | None
    old_obj: dict[str, Any] | None


@dataclass(frozen=True)
class Decision:
    """Outcome of change detection: an event to send, or the message explaining why not."""

    event: WatchEvent | None
    message: str
    outcome: str

    @property
    def send(self) -> bool:
        return self.event is not None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _object(request: dict[str, Any], field: str) -> dict[str, Any] | None:
    value = request.get(field)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ReviewError(f"request.{field} must be a JSON object")
    return value


def _go_number(text: str) -> int | float:
    """A JSON integer as Go's ``encoding/json`` holds it in a map (a float64): exact while it is
    short, a float beyond (converting thousands of digits to ``int`` is refused by Python)."""
    return int(text) if len(text) < 300 else float(text)


_TOKEN = re.compile(
    r'[ \t\n\r]*(?:("(?:[^"\\\x00-\x1f]|\\.)*")'
    r"|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)|(true|false|null)|([{}\[\],:]))"
)
_LITERALS = {"true": True, "false": False, "null": None}


def _loads_deep(text: str) -> Any:
    """``json.loads`` for documents nested past the interpreter's recursion limit (up to
    ``MAX_REVIEW_DEPTH``): the same values, built with an explicit stack."""
    stack: list[list[Any]] = []  # [container, key of the value being read]
    root: Any = None
    state, pos = "value", 0

    def bad() -> ReviewError:
        return ReviewError(f"request body is not valid JSON (at character {pos})")

    def after_value() -> str:
        return "comma" if stack else "done"

    def attach(value: Any) -> None:
        nonlocal root
        if not stack:
            root = value
        elif isinstance(stack[-1][0], dict):
            stack[-1][0][stack[-1][1]] = value
        else:
            stack[-1][0].append(value)

    while True:
        match = _TOKEN.match(text, pos)
        if match is None:
            if state == "done" and not text[pos:].strip(" \t\n\r"):
                return root
            raise bad()
        pos = match.end()
        string, number, literal, punct = match.groups()
        container = stack[-1][0] if stack else None
        if state == "done":
            raise bad()
        if state in ("key", "key-or-close"):
            if punct == "}" and state == "key-or-close":
                stack.pop()
                state = after_value()
            elif string is not None:
                stack[-1][1], state = json.loads(string), "colon"
            else:
                raise bad()
        elif state == "colon":
            if punct != ":":
                raise bad()
            state = "value"
        elif state == "comma":
            if punct == ",":
                state = "key" if isinstance(container, dict) else "value"
            elif punct == ("}" if isinstance(container, dict) else "]"):
                stack.pop()
                state = after_value()
            else:
                raise bad()
        elif punct == "]" and state == "value-or-close":
            stack.pop()
            state = after_value()
        elif punct in ("{", "["):
            if len(stack) >= MAX_REVIEW_DEPTH:
                raise ReviewError(f"request body nested deeper than {MAX_REVIEW_DEPTH:,} levels")
            new: Any = {} if punct == "{" else []
            attach(new)
            stack.append([new, None])
            state = "key-or-close" if punct == "{" else "value-or-close"
        elif string is not None:
            attach(json.loads(string))
            state = after_value()
        elif number is not None:
            attach(json.loads(number, parse_int=_go_number))
            state = after_value()
        elif literal is not None:
            attach(_LITERALS[literal])
            state = after_value()
        else:
            raise bad()


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body, parse_int=_go_number)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReviewError(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        pass
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReviewError(f"request body is not valid JSON: {exc}") from None
    return _loads_deep(text)


def parse_admission_review(body: bytes) -> AdmissionRequest:
    """Validate an AdmissionReview body; raise :class:`ReviewError` with a human reason."""
    review = _loads(body)
    if not isinstance(review, dict):
        raise ReviewError("request body must be a JSON object (an AdmissionReview)")
    if review.get("kind") != REVIEW_KIND:
        raise ReviewError(f"kind must be {REVIEW_KIND!r}, got {review.get('kind')!r}")
    api_version = review.get("apiVersion")
    if api_version not in REVIEW_API_VERSIONS:
        raise ReviewError(f"apiVersion must be one of {', '.join(REVIEW_API_VERSIONS)}, got {api_version!r}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewError("AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid must be a non-empty string")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise ReviewError(f"request.operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    obj, old_obj = _object(request, "object"), _object(request, "oldObject")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise ReviewError(f"request.object is required for {operation}")
    if operation in ("UPDATE", "DELETE") and old_obj is None:
        raise ReviewError(f"request.oldObject is required for {operation}")
    return AdmissionRequest(
        api_version=api_version,
        uid=uid,
        operation=operation,
        kind=GroupVersionKind.from_dict(request.get("kind")),
        sub_resource=_text(request.get("subResource")),
        namespace=_text(request.get("namespace")),
        name=_text(request.get("name")),
        obj=obj,
        old_obj=old_obj,
    )


def _namespaced_name(obj: dict[str, Any]) -> str:
    event = WatchEvent.for_object(obj)
    return f"{event.namespace}/{event.name}"


def _field(obj: dict[str, Any], name: str) -> dict[str, Any] | None:
    # Upstream decodes spec/status into map[string]any: missing, null and non-object values (Go
    # skips a field of the wrong type) all end up as a nil map, i.e. "absent".
    value = obj.get(name)
    return value if isinstance(value, dict) else None


def _float64(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def deep_equal(a: Any, b: Any) -> bool:
    """``reflect.DeepEqual`` on values Go's ``encoding/json`` produced.

    Python's ``==`` says ``True == 1`` and ``1 == 1.0``; Go decodes every JSON number to float64
    (so ``1`` and ``1.0`` are equal, large integers compare after rounding) but a bool never equals
    a number. Nil and empty maps differ in Go, as ``None`` and ``{}`` do here.

    Iterative: an object nested as deep as the API server allows compares like any other (a
    recursive comparison raised RecursionError past a few hundred levels).
    """
    pending = [(a, b)]
    while pending:
        a, b = pending.pop()
        if isinstance(a, bool) or isinstance(b, bool):
            same = type(a) is type(b) and a == b
        elif isinstance(a, (int, float)) and isinstance(b, (int, float)):
            same = _float64(a) == _float64(b)
        elif isinstance(a, dict) and isinstance(b, dict):
            same = a.keys() == b.keys()
            if same:
                pending.extend((a[key], b[key]) for key in a)
        elif isinstance(a, list) and isinstance(b, list):
            same = len(a) == len(b)
            if same:
                pending.extend(zip(a, b, strict=True))
        else:
            same = type(a) is type(b) and a == b
        if not same:
            return False
    return True


def detect_change(request: AdmissionRequest) -> Decision:
    """Decide whether the admission should become a WatchEvent (upstream's rules, exactly).

    * CREATE sends ``object``, DELETE sends ``oldObject``; CONNECT never sends.
    * UPDATE without sub-resource sends when ``spec`` differs (deep comparison) or when either side
      has no ``spec`` (the object may not have one, so every update counts).
    * UPDATE of the ``status`` sub-resource sends when ``status`` differs; any other sub-resource is
      not watched.
    """
    if request.operation == "CONNECT":
        return Decision(None, f"operation CONNECT not supported for {request.kind}", "unsupported-operation")
    if request.operation == "CREATE":
        assert request.obj is not None
        return Decision(WatchEvent.for_object(request.obj, Change.of(request)), KCP_SUCCEEDED, "create")
    if request.operation == "DELETE":
        assert request.old_obj is not None
        return Decision(WatchEvent.for_object(request.old_obj, Change.of(request)), KCP_SUCCEEDED, "delete")
    obj, old = request.obj, request.old_obj
    assert obj is not None
    assert old is not None
    sub_resource = request.sub_resource.lower()
    if sub_resource == "":
        new_spec, old_spec = _field(obj, "spec"), _field(old, "spec")
        changed = new_spec is None or old_spec is None or not deep_equal(new_spec, old_spec)
        outcome = "spec-changed"
    elif sub_resource == STATUS_SUBRESOURCE:
        changed = not deep_equal(_field(obj, "status"), _field(old, "status"))
        outcome = "status-changed"
    else:
        return Decision(
            None, f"invalid subresource: watched resource {_namespaced_name(obj)}", "invalid-subresource"
        )
    if not changed:
        return Decision(None, f"no change detected on watched resource {_namespaced_name(obj)}", "no-change")
    return Decision(WatchEvent.for_object(obj, Change.of(request)), KCP_SUCCEEDED, outcome)


def admission_response(request: AdmissionRequest, message: str) -> bytes:
    """The AdmissionReview answer: always allowed, the message tells what the watcher did."""
    review = {
        "apiVersion": request.api_version,
        "kind": REVIEW_KIND,
        "response": {
            "uid": request.uid,
            "allowed": True,
            "status": {"metadata": {}, "status": "Success", "message": message},
        },
    }
    return json.dumps(review, separators=(",", ":")).encode()
