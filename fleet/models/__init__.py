"""Core domain models of the control plane."""

from kernel.models import NamespacedResourceModel, ResourceModel

from .jobs import Job, JobKind, JobStatus
from .kyma import Kyma, KymaState
from .module import Module
from .moduleconfig import ModuleConfig, RevisionCounter
from .records import DriftCount, ReconcileRecord
from .syncresource import ApplyStrategy, DeletionPolicy, ManifestState, SyncResource

__all__ = [
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
    "NamespacedResourceModel",
    "ReconcileRecord",
    "ResourceModel",
    "RevisionCounter",
    "SyncResource",
]
