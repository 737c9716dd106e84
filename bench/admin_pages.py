"""Admin pages at fleet scale: the fleet dashboard and a Kyma page.

Seeds a fleet (Kymas, watch events spread over the Kymas and the last six hours, reconcile
records, certificates, module configs and sync resources) with bulk inserts, then reports the
median and p95 server time (in-process, Django test client) and the SQL query count of each page,
at a baseline of 100 Kymas / 10,000 events and at 10,000 Kymas / 1,000,000 events, with the ratio.
Goal: under 300 ms, and the same number of queries whatever the size. The lists the dashboard
links to are measured too (for information). The last line is
``admin_pages: dashboard_ms=X kyma_page_ms=Y queries_constant=yes|no`` (medians at the largest size).

    python bench/admin_pages.py [--sizes 100:10000,10000:1000000] [--repeat 20] [--smoke]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import time
import uuid

from common import database_label, measure_page, parse_args, setup_django, summary

setup_django("admin_pages", static=True)

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from console.dashboard.selectors import Window
from fleet.models import (
    Job,
    Kyma,
    Module,
    ModuleConfig,
    ReconcileMark,
    ReconcileRecord,
    ReconcileState,
    RuntimeSync,
    SyncResource,
    WatcherContact,
    WatcherSettingsPin,
)
from kernel.sealing import Sealed
from listener.models import WatchEventRecord
from pki import services as pki
from pki.models import Certificate, CertificateAuthority
from watchers.models import Watcher

HOURS = 6
STATES = ["Ready"] * 16 + ["Processing", "Warning", "Error", ""]
MODULES = ("keda", "btp-operator", "serverless")
KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n"
MANIFESTS = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: kyma-system}\n"
CONDITIONS_OK = [
    {"type": "Runtime", "status": "True", "reason": "Reachable", "message": "the API server answers"},
    {"type": "SKRWebhook", "status": "True", "reason": "Ready", "message": "the runtime watcher is ready"},
]
CONDITIONS_ERROR = [
    CONDITIONS_OK[0],
    {"type": "SKRWebhook", "status": "False", "reason": "WatcherFailing", "message": "CrashLoopBackOff"},
]


# The rows beside each Kyma (fleet.models.bookkeeping): deleted before their Kymas
BESIDE_KYMA = [ReconcileState, ReconcileMark, WatcherContact, RuntimeSync, WatcherSettingsPin]


def wipe() -> None:
    """Empty the tables the bench fills (children first; plain DELETEs, no cascade collection)."""
    models = [Job, WatchEventRecord, ReconcileRecord, Certificate, CertificateAuthority]
    models += [*BESIDE_KYMA, SyncResource, ModuleConfig, Kyma, Module, Watcher]
    with connection.cursor() as cursor:
        for model in models:
            cursor.execute(f"DELETE FROM {model._meta.db_table}")


def insert_rows(model: type, columns: list[str], rows: list[tuple]) -> None:
    table = model._meta.db_table
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def seed_kymas(count: int, now: dt.datetime, rng: random.Random) -> list[int]:
    sealed = Sealed.seal(KUBECONFIG)
    batch, beside = [], []
    for number in range(count):
        state = STATES[number % len(STATES)]
        seen = rng.random()
        batch.append(
            Kyma(
                uid=uuid.uuid4(),
                namespace="kcp-system",
                name=f"c-{number:06d}",
                runtime_id=f"rt-{number:06d}",
                skr_domain=f"c-{number:06d}.kyma.example.com",
                modules=[
                    {"name": m, "customResourcePolicy": "CreateAndDelete", "managed": True} for m in MODULES
                ],
                state=state,
                conditions=CONDITIONS_ERROR if state == "Error" else CONDITIONS_OK,
                module_status=[{"name": m, "state": "Ready", "version": "1.0.0"} for m in MODULES],
                kubeconfig=sealed,
            )
        )
        beside.append(
            (
                now - dt.timedelta(seconds=rng.randrange(3600)),
                rng.randrange(1, 9) if state == "Error" else 0,
                None
                if seen < 0.03
                else now
                - dt.timedelta(seconds=rng.randrange(600, 36000) if seen < 0.08 else rng.randrange(60)),
            )
        )
    Kyma.objects.bulk_create(batch, batch_size=2000)
    ids = list(Kyma.objects.order_by("id").values_list("id", flat=True))
    # the rows beside each Kyma: its last reconcile and error streak, when its watcher was heard
    ReconcileState.objects.bulk_create(
        [
            ReconcileState(kyma_id=kyma_id, last_reconcile_at=last, error_streak=streak)
            for kyma_id, (last, streak, _) in zip(ids, beside, strict=True)
        ],
        batch_size=2000,
    )
    WatcherContact.objects.bulk_create(
        [
            WatcherContact(kyma_id=kyma_id, last_seen_at=heard)
            for kyma_id, (_, _, heard) in zip(ids, beside, strict=True)
            if heard is not None
        ],
        batch_size=2000,
    )
    return ids


def seed_events(kyma_ids: list[int], count: int, now: dt.datetime, rng: random.Random) -> None:
    """Events in the order the listener writes them (by time), from random Kymas of the fleet."""
    adapt = connection.ops.adapt_datetimefield_value
    columns = ["kyma_id", "received_at", "component", "contract", "watched_namespace", "watched_name"]
    columns += ["gvk_group", "gvk_version", "gvk_kind", "outcome", "count"]
    outcomes = ["queued"] * 6 + ["coalesced"] * 3 + ["forwarded"]
    span = HOURS * 3600
    for start in range(0, count, 50_000):
        rows = [
            (
                kyma_ids[rng.randrange(len(kyma_ids))],
                adapt(now - dt.timedelta(seconds=span * (count - index) / count)),
                "lifecycle-manager",
                "v2",
                "kyma-system",
                "default",
                "operator.kyma-project.io",
                "v1beta2",
                "Kyma",
                outcomes[index % len(outcomes)],
                1 + (index % 7 == 0) * rng.randrange(1, 20),
            )
            for index in range(start, min(count, start + 50_000))
        ]
        insert_rows(WatchEventRecord, columns, rows)


def seed_reconciles(kyma_ids: list[int], now: dt.datetime, rng: random.Random) -> None:
    """``RECONCILE_RECORDS_KEPT`` per Kyma over the last hours, written in time order."""
    adapt = connection.ops.adapt_datetimefield_value
    per_kyma = settings.RECONCILE_RECORDS_KEPT
    # Every NOT NULL column: model defaults (``changes``: ``[]``) are Python's, not the database's.
    columns = ["kyma_id", "started_at", "duration_ms", "state", "runtime_writes", "message"]
    columns += ["reason", "changes", "drift_corrected"]
    starts = sorted(
        (now - dt.timedelta(seconds=rng.random() * HOURS * 3600), kyma_id)
        for kyma_id in kyma_ids
        for _ in range(per_kyma)
    )
    for first in range(0, len(starts), 50_000):
        rows = [
            (
                kyma_id,
                adapt(started),
                int(rng.lognormvariate(4.5, 0.8)),
                "Ready",
                rng.randrange(3),
                "",
                "periodic",
                "[]",
                "[]",
            )
            for started, kyma_id in starts[first : first + 50_000]
        ]
        insert_rows(ReconcileRecord, columns, rows)


def seed_certificates(kyma_ids: list[int], page_kyma: Kyma, now: dt.datetime, rng: random.Random) -> None:
    """Real certificates for the measured Kyma (issued, then renewed); copies of one for the rest."""
    pki.ca_bootstrap(now=now)
    pki.certificate_issue_for_kyma(kyma=page_kyma, now=now - dt.timedelta(days=31))
    template = pki.certificate_issue_for_kyma(kyma=page_kyma, now=now)
    rows = []
    for kyma_id in kyma_ids:
        if kyma_id == page_kyma.pk:
            continue
        odd = rng.random()
        not_after = now + dt.timedelta(days=3 if odd < 0.02 else 50)
        renew_after = now - dt.timedelta(hours=5) if odd < 0.03 else not_after - dt.timedelta(days=30)
        rows.append(
            Certificate(
                common_name=f"rt-{kyma_id}",
                serial=uuid.uuid4().hex,
                fingerprint=f"bench:{kyma_id}",
                key_type=template.key_type,
                certificate_pem=template.certificate_pem,
                private_key=template.private_key,
                not_before=now - dt.timedelta(days=10),
                not_after=not_after,
                purpose=template.purpose,
                kyma_id=kyma_id,
                issuer_id=template.issuer_id,
                dns_names=template.dns_names,
                renew_after=renew_after,
            )
        )
    Certificate.objects.bulk_create(rows, batch_size=2000)


def seed_modules(kyma_ids: list[int]) -> None:
    modules = [
        Module.objects.create(
            name=name,
            channels={"regular": "1.0.0"},
            cr_version="v1alpha1",
            cr_kind=name.title().replace("-", ""),
            cr_plural=f"{name}s",
            cr_group="operator.kyma-project.io",
        )
        for name in MODULES
    ]
    Watcher.objects.create(
        namespace="kcp-system",
        name="kyma-watcher",
        manager="lifecycle-manager",
        component="lifecycle-manager",
        labels_to_watch={"operator.kyma-project.io/watched-by": "kyma"},
        resource_to_watch={"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
        service_info={"name": "klm-events", "namespace": "kcp-system", "port": 8082},
    )
    status = [{"kind": "ConfigMap", "name": "settings", "namespace": "kyma-system", "state": "Applied"}]
    revision = 0
    for start in range(0, len(kyma_ids), 2000):
        configs, syncs = [], []
        for kyma_id in kyma_ids[start : start + 2000]:
            for module in modules:
                revision += 1
                configs.append(
                    ModuleConfig(
                        kyma_id=kyma_id,
                        module=module,
                        namespace="kcp-system",
                        name=f"{kyma_id}-{module.name}",
                        spec={"replicas": 1},
                        revision=revision,
                        status={"state": "Ready"},
                    )
                )
            syncs.append(
                SyncResource(
                    kyma_id=kyma_id,
                    module=modules[0],
                    namespace="kcp-system",
                    name=f"{kyma_id}-keda",
                    manifests=MANIFESTS,
                    manifest_status=status,
                )
            )
        ModuleConfig.objects.bulk_create(configs)
        SyncResource.objects.bulk_create(syncs)


def seed(kymas: int, events: int, *, again: bool) -> Kyma:
    """The fleet of that size (re-created unless it is already there); returns the measured Kyma."""
    now, rng = timezone.now(), random.Random(7)
    newest = WatchEventRecord.objects.order_by("-received_at").values_list("received_at", flat=True).first()
    stale = newest is None or newest < now - dt.timedelta(minutes=10)  # the last hour must be busy
    if again or stale or Kyma.objects.count() != kymas or WatchEventRecord.objects.count() != events:
        started = time.perf_counter()
        wipe()
        kyma_ids = seed_kymas(kymas, now, rng)
        page_kyma = Kyma.objects.filter(state="Error").order_by("id").first()
        seed_events(kyma_ids, events, now, rng)
        seed_reconciles(kyma_ids, now, rng)
        seed_certificates(kyma_ids, page_kyma, now, rng)
        seed_modules(kyma_ids)
        print(f"    seeded in {time.perf_counter() - started:.1f} s")
    return Kyma.objects.filter(state="Error").order_by("id").first()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100:10000,10000:1000000", help="KYMAS:EVENTS,...")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--reseed", action="store_true", help="seed even when the stored fleet has these sizes"
    )
    args = parse_args(parser, smoke={"sizes": "40:400,80:800", "repeat": 2})
    sizes = [tuple(int(n) for n in size.split(":")) for size in args.sizes.split(",")]

    users = get_user_model()
    admin = users.objects.filter(username="bench").first() or users.objects.create_superuser(
        "bench", "", "bench-pw"
    )
    web = Client()
    web.force_login(admin)
    print(f"database: {database_label()}")
    results: dict[str, dict[tuple, tuple[float, float, int]]] = {}
    for kymas, events in sizes:
        print(f"\n--- {kymas:,} Kymas, {events:,} watch events")
        kyma = seed(kymas, events, again=args.reseed)
        since = Window.ending(timezone.now()).start.isoformat().replace("+", "%2B")
        pages = {
            "fleet dashboard": "/admin/fleet/",
            "Kyma page": f"/admin/controlplane/kyma/{kyma.pk}/change/",
            "(linked) Kymas with a silent watcher": "/admin/controlplane/kyma/?watcher=silent",
            "(linked) events of the last hour": f"/admin/listener/watcheventrecord/?received_at__gte={since}",
        }
        for name, path in pages.items():
            samples, queries = measure_page(web, path, args.repeat)
            ordered = sorted(samples)
            results.setdefault(name, {})[(kymas, events)] = (
                ordered[len(ordered) // 2],
                ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
                queries,
            )
            print(f"{name:40s} {summary(samples)}   {queries} queries")

    baseline = sizes[0]
    print(f"\nratio to the {baseline[0]:,}-Kyma / {baseline[1]:,}-event baseline (median time; queries)")
    for name, by_size in results.items():
        cells = [
            f"{k:,}/{e:,}: x{by_size[(k, e)][0] / by_size[baseline][0]:.2f}; {by_size[(k, e)][2]}q"
            for k, e in sizes[1:]
        ]
        constant = len({q for _, _, q in by_size.values()}) == 1
        goal = all(p95 < 300 for _, p95, _ in by_size.values())
        print(
            f"{name:40s} {'   '.join(cells)}   queries constant: {'yes' if constant else 'NO'}"
            f"   p95 < 300 ms: {'yes' if goal else 'NO'}"
        )
    largest = sizes[-1]
    constant = all(len({q for _, _, q in by_size.values()}) == 1 for by_size in results.values())
    print(
        f"admin_pages: dashboard_ms={results['fleet dashboard'][largest][0]:.1f} "
        f"kyma_page_ms={results['Kyma page'][largest][0]:.1f} queries_constant={'yes' if constant else 'no'}"
    )


if __name__ == "__main__":
    main()
