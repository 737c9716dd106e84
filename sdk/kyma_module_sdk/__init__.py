"""A client library for module managers of the Kyma fleet control plane (standard library only).

A manager declares one handler: it receives a :class:`ModuleConfig` (the module CR's spec in one
runtime) and returns the manifests that runtime should have. :class:`Manager` does the rest:
watches ModuleConfigs (polls when the server cannot watch), publishes the manifests as a
SyncResource, reports the module's status, retries with backoff, and resumes after a restart from
the last revision it handled (its state file). :func:`verify_notification` checks the control
plane's HMAC-signed webhook notifications.
"""

from .client import ApiError, Client
from .manager import CredentialRefused, Manager, ModuleConfig
from .notifications import InvalidNotification, notification_config, verify_notification

__all__ = [
    "ApiError",
    "Client",
    "CredentialRefused",
    "InvalidNotification",
    "Manager",
    "ModuleConfig",
    "notification_config",
    "verify_notification",
]
