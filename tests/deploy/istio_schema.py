"""The shape of Istio's ``networking.istio.io/v1`` Gateway and VirtualService, as JSON Schema.

Written from Istio's API reference for the fields we use and their close neighbours; unknown
fields are rejected at every level, as a strict apply would. Stricter than Istio in one place on
purpose: every route destination must name its port, so a route never depends on a Service
having a single port.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
# A Gateway/VirtualService host: optional "namespace/" (Gateways only), then a DNS name or wildcard.
HOST = (
    r"^([a-z0-9-]+/)?(\*|(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*)$"
)
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
TLS_VERSION = {"enum": ["TLS_AUTO", "TLSV1_0", "TLSV1_1", "TLSV1_2", "TLSV1_3"]}


def _obj(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


METADATA = _obj(
    {
        "name": {"type": "string", "pattern": DNS_SUBDOMAIN},
        "namespace": {"type": "string", "pattern": DNS_LABEL},
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
    "name",
)

SERVER_TLS = _obj(
    {
        "httpsRedirect": {"type": "boolean"},
        "mode": {
            "enum": ["PASSTHROUGH", "SIMPLE", "MUTUAL", "AUTO_PASSTHROUGH", "ISTIO_MUTUAL", "OPTIONAL_MUTUAL"]
        },
        "serverCertificate": {"type": "string"},
        "privateKey": {"type": "string"},
        "caCertificates": {"type": "string"},
        "caCrl": {"type": "string"},
        "credentialName": {"type": "string", "pattern": DNS_SUBDOMAIN},
        "credentialNames": STRINGS,
        "subjectAltNames": STRINGS,
        "verifyCertificateSpki": STRINGS,
        "verifyCertificateHash": STRINGS,
        "minProtocolVersion": TLS_VERSION,
        "maxProtocolVersion": TLS_VERSION,
        "cipherSuites": STRINGS,
    }
)
# Terminating TLS needs server credentials: a Secret, or files mounted into the gateway.
SERVER_TLS["allOf"] = [
    {
        "if": {
            "properties": {"mode": {"enum": ["SIMPLE", "MUTUAL", "OPTIONAL_MUTUAL"]}},
            "required": ["mode"],
        },
        "then": {
            "anyOf": [{"required": ["credentialName"]}, {"required": ["serverCertificate", "privateKey"]}]
        },
    }
]

GATEWAY = _obj(
    {
        "apiVersion": {"const": "networking.istio.io/v1"},
        "kind": {"const": "Gateway"},
        "metadata": METADATA,
        "spec": _obj(
            {
                "selector": STRING_MAP,
                "servers": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {
                            "port": _obj(
                                {
                                    "number": PORT,
                                    "protocol": {
                                        "enum": ["HTTP", "HTTPS", "GRPC", "HTTP2", "MONGO", "TCP", "TLS"]
                                    },
                                    "name": {"type": "string"},
                                    "targetPort": PORT,
                                },
                                "number",
                                "protocol",
                            ),
                            "bind": {"type": "string"},
                            "hosts": {
                                "type": "array",
                                "minItems": 1,
                                "items": {"type": "string", "pattern": HOST},
                            },
                            "tls": SERVER_TLS,
                            "name": {"type": "string"},
                        },
                        "port",
                        "hosts",
                    ),
                },
            },
            "servers",
        ),
    },
    "apiVersion",
    "kind",
    "metadata",
    "spec",
)

STRING_MATCH = {
    "type": "object",
    "properties": {key: {"type": "string", "minLength": 1} for key in ("exact", "prefix", "regex")},
    "additionalProperties": False,
    "minProperties": 1,
    "maxProperties": 1,
}
DESTINATION = _obj(
    {
        "host": {"type": "string", "pattern": HOST},
        "subset": {"type": "string"},
        "port": _obj({"number": PORT}, "number"),
    },
    "host",
    "port",
)
HTTP_ROUTE = _obj(
    {
        "name": {"type": "string"},
        "match": {
            "type": "array",
            "items": _obj(
                {
                    "name": {"type": "string"},
                    "uri": STRING_MATCH,
                    "method": STRING_MATCH,
                    "authority": STRING_MATCH,
                    "headers": {"type": "object", "additionalProperties": STRING_MATCH},
                    "port": PORT,
                    "gateways": STRINGS,
                    "ignoreUriCase": {"type": "boolean"},
                }
            ),
        },
        "route": {
            "type": "array",
            "minItems": 1,
            "items": _obj(
                {
                    "destination": DESTINATION,
                    "weight": {"type": "integer", "minimum": 0},
                    "headers": {"type": "object"},
                },
                "destination",
            ),
        },
        "timeout": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(ms|s|m|h)$"},
        "retries": {"type": "object"},
        "rewrite": {"type": "object"},
        "headers": {"type": "object"},
    },
    "route",
)

VIRTUAL_SERVICE = _obj(
    {
        "apiVersion": {"const": "networking.istio.io/v1"},
        "kind": {"const": "VirtualService"},
        "metadata": METADATA,
        "spec": _obj(
            {
                "hosts": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": HOST}},
                "gateways": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": HOST}},
                "http": {"type": "array", "minItems": 1, "items": HTTP_ROUTE},
                "exportTo": STRINGS,
            },
            "hosts",
            "http",
        ),
    },
    "apiVersion",
    "kind",
    "metadata",
    "spec",
)

SCHEMAS = {"Gateway": GATEWAY, "VirtualService": VIRTUAL_SERVICE}


def istio_errors(doc: dict[str, Any]) -> list[str]:
    """Every way ``doc`` departs from the Istio v1 shape, as ``path: message`` lines."""
    schema = SCHEMAS.get(doc.get("kind"))
    if schema is None:
        return [f"kind: {doc.get('kind')!r} is neither a Gateway nor a VirtualService"]
    validator = Draft202012Validator(schema)
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]
