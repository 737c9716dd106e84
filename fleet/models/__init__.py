"""Core domain models of the control plane."""

from kernel.models import NamespacedResourceModel, ResourceModel

from .credentials import MODULE_KEY_MARKER, ModuleCredential
from .jobs import Job, JobKind, JobStatus
from .kyma import Kyma, KymaState
from .module import Module
from .moduleconfig import ModuleConfig, ModuleConfigDeletion, ModuleConfigWatch, RevisionCounter
from .records import DriftCount, ReconcileRecord
from .syncresource import ApplyStrategy, DeletionPolicy, ManifestState, SyncResource

__all__ = [
    "MODULE_KEY_MARKER",
    "ApplyStrategy",
    "DeletionPolicy",
    "DriftCount",
    "Job",
    "JobKind",
    "JobStatus",
    "Kyma",
    "KymaState",
    "ManifestState",
    "Module",
    "ModuleConfig",
    "ModuleConfigDeletion",
    "ModuleConfigWatch",
    "ModuleCredential",
    "NamespacedResourceModel",
    "ReconcileRecord",
    "ResourceModel",
    "RevisionCounter",
    "SyncResource",
]
