"""What a Module's admin page shows beyond its fields: its manager's credentials, its manifest
policy, its configuration per runtime and the state of its SyncResources across the fleet.

An operator answering "is keda healthy everywhere, and who can push what for it?" reads one
page. Rows are bounded (``ROWS``) so a module enabled in thousands of runtimes stays cheap; the
counts cover every row, and the lists link to the filtered changelists for the rest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fleet.models import ManifestState, Module, ModuleConfig, ModuleCredential, SyncResource
from fleet.models.manifest_policy import BUILTIN_SCOPES, ManifestPolicy

ROWS = 100


@dataclass
class SyncRow:
    resource: SyncResource
    state: str
    counts: dict[str, int]
    problem: str


@dataclass
class ModulePage:
    credentials: list[ModuleCredential]
    policy: ManifestPolicy
    policy_default_namespaces: bool
    cluster_kinds_allowed: list[str]
    configs: list[ModuleConfig]
    config_count: int
    config_states: dict[str, int]
    syncs: list[SyncRow]
    sync_count: int
    sync_states: dict[str, int] = field(default_factory=dict)


def _rule_text(rule: dict[str, str]) -> str:
    group, version, kind = rule.get("group", ""), rule.get("version", ""), rule.get("kind", "")
    head = f"{group}/{version}" if version else (group or "core")
    return f"{kind} ({head})"


def _sync_row(resource: SyncResource) -> SyncRow:
    counts = Counter(entry.get("state", "") for entry in resource.manifest_status)
    failed = [e for e in resource.manifest_status if e.get("state") == ManifestState.FAILED]
    problem = (
        f"{failed[0].get('kind')} {failed[0].get('name')}: {failed[0].get('message', '')}" if failed else ""
    )
    return SyncRow(resource, resource.state, dict(sorted(counts.items())), problem)


def module_page(module: Module) -> ModulePage:
    """A handful of queries, however many runtimes use the module."""
    policy = module.manifest_policy
    configs = ModuleConfig.objects.filter(module=module).select_related("kyma")
    config_states = Counter(
        (status or {}).get("state") or "New" for status in configs.values_list("status", flat=True).iterator()
    )
    syncs = SyncResource.objects.filter(module=module).select_related("kyma").defer("manifests")
    sync_rows = [_sync_row(resource) for resource in syncs.order_by("namespace", "name").iterator()]
    # Failed first: what needs the operator; then the rest in name order.
    order = {ManifestState.FAILED: 0, ManifestState.PENDING: 1, ManifestState.APPLIED: 2}
    sync_rows.sort(key=lambda row: order.get(row.state, 3))
    listed = [_rule_text(rule) for rule in policy.kinds]
    return ModulePage(
        credentials=list(module.credentials.select_related("created_by").order_by("revoked_at", "name")),
        policy=policy,
        policy_default_namespaces=not module.manifest_namespaces,
        cluster_kinds_allowed=listed,
        configs=list(configs.order_by("kyma__namespace", "kyma__name")[:ROWS]),
        config_count=sum(config_states.values()),
        config_states=dict(sorted(config_states.items())),
        syncs=sync_rows[:ROWS],
        sync_count=len(sync_rows),
        sync_states=dict(sorted(Counter(row.state for row in sync_rows).items())),
    )


def known_cluster_kinds() -> list[str]:
    """Kubernetes' own cluster-scoped kinds, for the policy's help text."""
    return sorted(kind for (group, kind), namespaced in BUILTIN_SCOPES.items() if not namespaced)
