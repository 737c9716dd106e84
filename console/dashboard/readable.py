"""Errors as an operator reads them: one sentence first, the raw detail folded away beneath it.

Statuses carry what the runtime client or the runtime said (``HTTPSConnectionPool(host=...): Max
retries exceeded ... [Errno 111] Connection refused``). Pages lead with a sentence built from the
condition's reason and the recognisable cause in the message, and keep the message itself for the
``<details>`` under it, so nothing is lost and nothing raw is in the way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SENTENCE_MAX = 160

# Causes recognised in a raw message, most specific first: (pattern, words for the sentence).
CAUSES = (
    (re.compile(r"connection refused", re.I), "connection refused"),
    (re.compile(r"timed? ?out|timeout", re.I), "timed out"),
    (re.compile(r"name or service not known|nodename nor servname|getaddrinfo failed", re.I), "unknown host"),
    (
        re.compile(r"certificate verify failed|CERTIFICATE_VERIFY_FAILED", re.I),
        "its TLS certificate is not trusted",
    ),
    (re.compile(r"no route to host|network is unreachable", re.I), "no route to the host"),
    (
        re.compile(r"connection reset|remote end closed|RemoteDisconnected", re.I),
        "the connection was dropped",
    ),
    (re.compile(r"\b401\b|Unauthorized", re.I), "the credentials were refused (401)"),
    (re.compile(r"\b403\b|Forbidden", re.I), "access is forbidden (403)"),
    (re.compile(r"\b(5\d\d)\b"), "it answered {0}"),
)

# A condition reason → the sentence's subject; "{cause}" is filled from the message when found.
SENTENCES = {
    "Unreachable": "The runtime's API server cannot be reached{cause}.",
    "Refused": "The runtime's API server refused the request{cause}.",
    "CleanupFailed": "The runtime could not be cleaned up{cause}.",
    "NoKubeconfig": "No kubeconfig is stored, so the runtime cannot be reached.",
    "CertificateError": "The runtime's watcher certificate could not be issued{cause}.",
    "ImagePullSecretError": "The runtime watcher cannot be rendered: its image pull secret is invalid.",
    "WatcherFailing": "The runtime watcher cannot run{cause}.",
    "WatcherNotReady": "Waiting for the runtime watcher to become ready.",
    "ModuleNotInCatalog": "A module of this Kyma is not in the module catalog{cause}.",
    "ModulesNotReady": "Not every module is ready{cause}.",
    "InvalidRuntimeSpec": "The spec a user wrote in the runtime was rejected{cause}.",
    "ApplyFailed": "Some SyncResource manifests could not be applied{cause}.",
}
WAITING_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError")


@dataclass(frozen=True)
class Readable:
    sentence: str
    detail: str  # the raw message; empty when the sentence says it all

    def __bool__(self) -> bool:
        return bool(self.sentence)


def _cause(reason: str, message: str) -> str:
    for name in WAITING_REASONS:
        if name in message:
            return name
    if reason in ("ModuleNotInCatalog", "ModulesNotReady"):
        return message.split(": ", 1)[-1][:80]
    for pattern, words in CAUSES:
        found = pattern.search(message)
        if found:
            return words.format(*found.groups())
    return ""


def _first_sentence(message: str) -> str:
    text = " ".join(message.split())
    text = re.split(r"(?<=[.;])\s", text, maxsplit=1)[0].rstrip(".;")
    if len(text) > SENTENCE_MAX:
        text = text[: SENTENCE_MAX - 1].rstrip() + "…"
    return text[:1].upper() + text[1:] + "." if text else ""


def readable_error(reason: str, message: str) -> Readable:
    """``("Unreachable", "HTTPSConnectionPool(...) ... Connection refused")`` →
    "The runtime's API server cannot be reached: connection refused." with the raw text as detail."""
    message = message or ""
    template = SENTENCES.get(reason)
    if template is not None:
        cause = _cause(reason, message)
        sentence = template.format(cause=f": {cause}" if cause else "")
    else:
        sentence = _first_sentence(message) or (f"{reason}." if reason else "")
    detail = message if message and message.rstrip(".") != sentence.rstrip(".") else ""
    return Readable(sentence, detail)
