"""Core domain models of the control plane."""

from kernel.models import NamespacedResourceModel, ResourceModel

from .bookkeeping import ReconcileMark, ReconcileState, RuntimeSync, WatcherContact, WatcherSettingsPin
from .credentials import MODULE_KEY_MARKER, ModuleCredential
from .jobs import Job, JobKind, JobStatus
from .kyma import Kyma, KymaState
from .maintenance import MaintenancePolicy
from .module import Module
from .moduleconfig import ModuleConfig, ModuleConfigDeletion, ModuleConfigWatch, RevisionCounter
from .records import DriftCount, FleetCounter, ReconcileRecord
from .rollout import (
    Rollout,
    RolloutEvent,
    RolloutKind,
    RolloutState,
    RolloutTarget,
    RuntimeWatcherSettings,
    TargetState,
)
from .syncresource import ApplyStrategy, DeletionPolicy, ManifestState, SyncResource

__all__ = [
    "MODULE_KEY_MARKER",
    "ApplyStrategy",
    "DeletionPolicy",
    "DriftCount",
    "FleetCounter",
    "Job",
    "JobKind",
    "JobStatus",
    "Kyma",
    "KymaState",
    "MaintenancePolicy",
    "ManifestState",
    "Module",
    "ModuleConfig",
    "ModuleConfigDeletion",
    "ModuleConfigWatch",
    "ModuleCredential",
    "NamespacedResourceModel",
    "ReconcileMark",
    "ReconcileRecord",
    "ReconcileState",
    "ResourceModel",
    "RevisionCounter",
    "Rollout",
    "RolloutEvent",
    "RolloutKind",
    "RolloutState",
    "RolloutTarget",
    "RuntimeSync",
    "RuntimeWatcherSettings",
    "SyncResource",
    "TargetState",
    "WatcherContact",
    "WatcherSettingsPin",
]
