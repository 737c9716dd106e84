"""Reads behind a Kyma's admin page: its timeline, modules and runtime-watcher manifests.

Every read is bounded (the newest N rows through the per-Kyma indexes) and the page makes the
same number of queries whatever the Kyma's history or the fleet's size. Nothing here writes:
in particular the page never issues a certificate, and never shows a private key.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from fleet import maintenance
from fleet.models import Kyma, KymaState, ModuleConfig, ReconcileRecord, SyncResource
from fleet.rollouts import selectors as rollout_selectors
from fleet.rollouts.targets import KymaTargets
from kernel import timefmt
from kernel.documents.dockerconfig import DockerConfigError
from kernel.documents.yamlio import dump_yaml
from kernel.models import AuditEntry
from listener.models import WatchEventRecord
from pki import selectors as pki_selectors
from pki import services as pki_services
from pki.models import Certificate, CertificatePurpose
from reconciler.watcher_resources import runtime_watchers
from watchers import runtime_config
from watchers.models import Watcher
from watchers.rendering import redacted, runtime_watcher_resources

from .readable import Readable, readable_error

EVENTS_SHOWN = 50
RECONCILES_SHOWN = 50
CERTIFICATES_SHOWN = 10
CHANGES_SHOWN = 50
SYNC_RESOURCES_SHOWN = 100
PLACEHOLDER = b"<no certificate issued yet>"


@dataclass(frozen=True)
class TimelineEntry:
    """One thing that happened to the Kyma: an event received, a reconcile, a certificate.

    ``changes`` are sentences (``channel regular → fast``) from the structured entries a reconcile
    recorded (:func:`fleet.models.records.describe_change`), ``why`` the reason it ran, and
    ``problem`` an error as one sentence with its raw text folded away."""

    at: dt.datetime
    kind: str  # "event" | "reconcile" | "certificate" | "change", or any other source's kind
    title: str
    detail: str = ""
    state: str = ""  # a Kyma state, for the badge
    label: str = ""  # the badge's text
    count: int = 1
    duration_ms: int | None = None
    why: str = ""
    changes: tuple[str, ...] = ()
    problem: Readable | None = None


def _event_entry(event: WatchEventRecord) -> TimelineEntry:
    watched = "/".join(part for part in (event.watched_namespace, event.watched_name) if part)
    failed = event.outcome == "forward-failed"
    return TimelineEntry(
        at=event.received_at,
        kind="event",
        title=f"{event.component}: {event.gvk_kind or 'object'} {watched}",
        detail=event.gvk,
        state="Error" if failed else "Processing",
        label=event.outcome,
        count=event.count,
    )


def _reconcile_entry(record: ReconcileRecord) -> TimelineEntry:
    failed = record.state == KymaState.ERROR
    problem = readable_error("", record.message) if failed and record.message else None
    writes = f"{record.runtime_writes} runtime write(s)"
    changes = tuple(record.change_lines())
    if not failed and record.message and not changes:
        writes = f"{writes}. {record.message}"
    elif not changes and not failed:
        writes = f"{writes}, nothing changed" if not record.runtime_writes else writes
    return TimelineEntry(
        at=record.started_at,
        kind="reconcile",
        title="Reconcile",
        detail=writes,
        state=record.state,
        label=record.state or "—",
        duration_ms=record.duration_ms,
        why=record.reason_text,
        changes=changes,
        problem=problem,
    )


def _certificate_entries(certificates: list[Certificate]) -> list[TimelineEntry]:
    """Issued (the oldest shown) or renewed (replacing the one before it), newest first."""
    entries = []
    for index, cert in enumerate(certificates):
        previous = certificates[index + 1] if index + 1 < len(certificates) else None
        replaces = f", replacing {previous.fingerprint[:23]}…" if previous else ""
        entries.append(
            TimelineEntry(
                at=cert.created_at,
                kind="certificate",
                title="Certificate renewed" if previous else "Certificate issued",
                detail=f"{cert.fingerprint[:23]}…, valid until {timefmt.display(cert.not_after)}{replaces}",
                state="Ready" if cert.superseded_at is None else "",
                label="current" if cert.superseded_at is None else "superseded",
            )
        )
    return entries


def kyma_certificates(kyma: Kyma, limit: int = CERTIFICATES_SHOWN) -> list[Certificate]:
    """The Kyma's newest runtime certificates (keys stay sealed; only the manifests use one)."""
    return list(
        Certificate.objects.filter(kyma=kyma, purpose=CertificatePurpose.RUNTIME).order_by(
            "-created_at", "-id"
        )[:limit]
    )


def _audit_entry(entry: AuditEntry) -> TimelineEntry:
    """A write (or refused write) of the Kyma, its kubeconfig, SyncResources or ModuleConfigs."""
    who = f"{entry.actor} ({entry.credential})" if entry.credential else entry.actor
    refused = entry.outcome == AuditEntry.Outcome.REFUSED
    target = f"{entry.kind} {entry.object_key}".strip()
    source = f" from {entry.source}" if entry.source else ""
    return TimelineEntry(
        at=entry.at,
        kind="change",
        title=f"{target} {entry.action}{' refused' if refused else ''}",
        detail=f"by {who} via {entry.via}{source}",
        state="Error" if refused else "Ready",
        label=entry.get_outcome_display(),
        changes=tuple(entry.change_lines()),
        problem=Readable(entry.reason, "") if refused and entry.reason else None,
    )


def kyma_timeline(kyma: Kyma, certificates: list[Certificate]) -> list[TimelineEntry]:
    """Events, reconciles, certificates and writes (who did what) merged, newest first (three
    queries)."""
    events = WatchEventRecord.objects.filter(kyma=kyma).order_by("-received_at")[:EVENTS_SHOWN]
    reconciles = ReconcileRecord.objects.filter(kyma=kyma).order_by("-started_at")[:RECONCILES_SHOWN]
    writes = AuditEntry.objects.filter(kyma_id=kyma.pk).order_by("-at", "-id")[:CHANGES_SHOWN]
    entries = [
        *(_event_entry(event) for event in events),
        *(_reconcile_entry(record) for record in reconciles),
        *_certificate_entries(certificates),
        *(_audit_entry(entry) for entry in writes),
    ]
    return sorted(entries, key=lambda entry: entry.at, reverse=True)


@dataclass
class SyncSummary:
    resource: SyncResource
    state: str
    counts: dict[str, int]
    problem: str


@dataclass
class ModuleRow:
    """One module of the Kyma: wanted (spec), observed (status), configured, synced."""

    name: str
    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None
    config: ModuleConfig | None = None
    syncs: list[SyncSummary] = field(default_factory=list)
    stale: bool = False  # the runtime is unreachable: ``status`` is the last state known

    @property
    def shown_state(self) -> str:
        """ "Unknown" while the runtime cannot be read; else the state it reported."""
        if self.status is None:
            return ""
        return "Unknown" if self.stale else self.status.get("state") or "New"


def _sync_summary(resource: SyncResource) -> SyncSummary:
    counts: dict[str, int] = {}
    problem = ""
    for entry in resource.manifest_status:
        counts[entry.get("state", "?")] = counts.get(entry.get("state", "?"), 0) + 1
        if not problem and entry.get("state") == "Failed":
            problem = f"{entry.get('kind')} {entry.get('name')}: {entry.get('message', '')}"
    return SyncSummary(resource, resource.state, counts, problem)


def runtime_unreachable(kyma: Kyma) -> dict[str, Any] | None:
    """The Runtime condition when it says the runtime cannot be read (module states are stale)."""
    condition = kyma.condition("Runtime")
    return condition if condition and condition.get("status") == "False" else None


def kyma_modules(kyma: Kyma) -> list[ModuleRow]:
    """The Kyma's modules with their ModuleConfig and SyncResources (two queries)."""
    rows: dict[str, ModuleRow] = {}
    stale = runtime_unreachable(kyma) is not None

    def row(name: str) -> ModuleRow:
        return rows.setdefault(name, ModuleRow(name=name, stale=stale))

    for module in kyma.module_entries():
        row(module["name"]).spec = module
    for status in kyma.module_status or ():
        if isinstance(status, dict) and status.get("name"):
            row(status["name"]).status = status
    configs = (
        ModuleConfig.objects.filter(kyma=kyma)
        .select_related("module")
        .only("id", "name", "namespace", "revision", "status", "updated_at", "module__name")
    )
    for config in configs:
        row(config.module.name).config = config
    syncs = (
        SyncResource.objects.filter(kyma=kyma)
        .select_related("module")
        .only("id", "name", "namespace", "manifest_status", "deletion_timestamp", "module__name")
        .order_by("module__name", "name")[:SYNC_RESOURCES_SHOWN]
    )
    for resource in syncs:
        row(resource.module.name).syncs.append(_sync_summary(resource))
    return sorted(rows.values(), key=lambda r: r.name)


@dataclass(frozen=True)
class WatcherManifests:
    yaml: str
    certificate: Certificate | None
    note: str


def active_watchers() -> list[Watcher]:
    """The Watchers every runtime gets (the reconciler renders the same set)."""
    return list(Watcher.objects.filter(deletion_timestamp__isnull=True).order_by("namespace", "name"))


def kyma_watcher_manifests(kyma: Kyma, certificates: list[Certificate]) -> WatcherManifests:
    """The runtime-watcher resources as the reconciler renders them, Secret values redacted.

    Uses the Kyma's current certificate when it has one; otherwise placeholders, because issuing
    a certificate is the reconcile's job, not a page view's.
    """
    now = timezone.now()
    current = next((cert for cert in certificates if cert.superseded_at is None), None)
    if current is not None:
        tls = pki_services.runtime_secret_data(current, now=now)
        note = "due for renewal: the next reconcile replaces it" if current.renew_after <= now else ""
    else:
        tls = {
            "ca.crt": pki_selectors.ca_bundle_pem(now) or PLACEHOLDER,
            "tls.crt": PLACEHOLDER,
            "tls.key": PLACEHOLDER,
        }
        why = "" if kyma.skr_domain else " (it needs an SKR domain first)"
        note = (
            f"No certificate has been issued for this Kyma yet{why}: the Secret is shown with placeholders."
        )
    watchers = runtime_watchers(KymaTargets(kyma), active_watchers())
    try:
        docs = redacted(
            runtime_watcher_resources(watchers=watchers, tls=tls, config=runtime_config.config_shown(kyma))
        )
    except DockerConfigError as exc:
        docs, note = [], f"Cannot render the runtime watcher: WATCHER_IMAGE_PULL_SECRET_FILE: {exc}"
    tls.clear()  # drop the private key as soon as the documents are rendered
    return WatcherManifests(yaml=dump_yaml(docs), certificate=current, note=note)


@dataclass(frozen=True)
class ConditionRow:
    type: str
    status: str
    reason: str
    problem: Readable
    since: str


def kyma_conditions(kyma: Kyma) -> list[ConditionRow]:
    """Conditions with their message as one sentence (the raw message folded beneath)."""
    rows = []
    for condition in kyma.conditions or ():
        status, reason, message = (
            condition.get("status", ""),
            condition.get("reason", ""),
            condition.get("message", ""),
        )
        problem = readable_error(reason, message) if status != "True" else Readable(message, "")
        rows.append(
            ConditionRow(
                condition.get("type", ""), status, reason, problem, condition.get("lastTransitionTime", "")
            )
        )
    return rows


def kyma_problem(kyma: Kyma) -> Readable | None:
    """Why a Kyma is not Ready, as one sentence: its first condition that is not True."""
    if kyma.state in ("", KymaState.READY):
        return None
    for condition in kyma.conditions or ():
        if condition.get("status") != "True":
            return readable_error(condition.get("reason", ""), condition.get("message", ""))
    operation = (kyma.last_operation or {}).get("operation", "")
    return readable_error("", operation) if kyma.state == KymaState.ERROR and operation else None


@dataclass
class KymaLive:
    """The parts of the page that change while one looks at it (polled by the page's script)."""

    kyma: Kyma
    problem: Readable | None
    unreachable: dict[str, Any] | None
    conditions: list[ConditionRow]
    timeline: list[TimelineEntry]
    modules: list[ModuleRow]
    certificates: list[Certificate]
    certificate: Certificate | None


@dataclass(frozen=True)
class KymaWindow:
    """The runtime's maintenance window: open now, or when the next one opens (or why not known)."""

    state: maintenance.WindowState
    skipped: bool  # the Kyma skips maintenance windows


@dataclass
class KymaPage:
    live: KymaLive
    manifests: WatcherManifests
    rollouts: list[rollout_selectors.KymaHold] = field(default_factory=list)
    window: KymaWindow | None = None

    @property
    def timeline(self) -> list[TimelineEntry]:
        return self.live.timeline

    @property
    def modules(self) -> list[ModuleRow]:
        return self.live.modules

    @property
    def certificates(self) -> list[Certificate]:
        return self.live.certificates


def kyma_live(kyma: Kyma) -> KymaLive:
    """Status, conditions, modules and timeline (six queries, whatever the history)."""
    certificates = kyma_certificates(kyma)
    return KymaLive(
        kyma=kyma,
        problem=kyma_problem(kyma),
        unreachable=runtime_unreachable(kyma),
        conditions=kyma_conditions(kyma),
        timeline=kyma_timeline(kyma, certificates),
        modules=kyma_modules(kyma),
        certificates=certificates,
        certificate=next((cert for cert in certificates if cert.superseded_at is None), None),
    )


def kyma_page(kyma: Kyma) -> KymaPage:
    """What the Kyma's admin page shows beyond its fields (a bounded number of queries, whatever
    the history): also which rollouts hold a target for it, and its maintenance window."""
    live = kyma_live(kyma)
    return KymaPage(
        live=live,
        manifests=kyma_watcher_manifests(kyma, live.certificates),
        rollouts=rollout_selectors.kyma_holds(kyma),
        window=KymaWindow(maintenance.window_of(kyma, timezone.now()), kyma.skip_maintenance_windows),
    )
