"""Requests per second against one runtime during a large reconcile, with and without the client's
rate limit.

A real kube-apiserver (v1.37, built from source by ``make kube``; envtest/) gets a Kyma with keda
and one SyncResource of ``--objects`` ConfigMaps, reconciled for the first time (every object
created) under the least-privilege identity of deploy/runtime-access/. The control plane's
requests are timed as the API server received them (its audit log). Two runs, each on a runtime
of its own:

  (a) limited: the defaults, upstream's SKR client limits (``RUNTIME_CLIENT_QPS`` 50,
      ``RUNTIME_CLIENT_BURST`` 100);
  (b) baseline: no limit (``RUNTIME_CLIENT_QPS=0``): what one reconcile sends when nothing holds
      it back.

For each: requests, seconds from the first to the last, the mean rate, the most requests in any
one second, and the requests that waited. A token bucket's promise is checked on (a): any ``k``
requests received within ``t`` seconds number at most ``BURST + QPS * t`` (``excess``, the most
requests beyond ``QPS * t``, is at most ``BURST``; two requests of slack: the server stamps
arrival, not departure). The ratio is (a)'s duration over (b)'s. Exits 1 when (a) broke the
promise. The last line::

    runtime_rate: objects=N requests=R limited_rps=A limited_peak_1s=P limited_excess=E throttled=T
        unlimited_rps=B unlimited_peak_1s=Q duration_ratio=X    (one line)

    python bench/runtime_rate.py [--objects 500] [--smoke]
"""

from __future__ import annotations

import argparse
import bisect
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import keda_module, klm_watcher, parse_args, setup_django

setup_django("runtime-rate")

import kubernetes
from django.conf import settings
from django.utils import timezone

from envtest.cluster import Cluster, RealRuntime
from envtest.node import Node
from envtest.runtime import Runtime
from fleet import queue
from fleet.k8s.client import client_for
from fleet.models import Kyma, Module
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from kernel.documents.yamlio import dump_yaml
from pki import services as pki
from reconciler.run import kyma_reconcile_run
from runtime_emulator import crd_manifest
from watchers.models import Watcher

KEDA_CRD = crd_manifest("operator.kyma-project.io", "Keda", versions=("v1alpha1",))
SLACK = 2  # requests: the server stamps arrival, and the network may bunch two sent apart


@dataclass(frozen=True)
class Run:
    requests: int
    seconds: float
    peak_1s: int
    excess: float  # the most requests within t seconds beyond QPS * t (the limit: BURST)
    throttled: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else float(self.requests)


def manifests(n: int) -> str:
    return "".join(
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: bench-{i:04d}, namespace: kyma-system}}\n"
        f"data: {{i: '{i}'}}\n"
        for i in range(n)
    )


def catalog() -> Module:
    Kyma.objects.all().delete()
    Module.objects.filter(name="keda").delete()
    Watcher.objects.all().delete()
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


def peak(stamps: list[float]) -> int:
    """The most requests in any one second (windows start at a request)."""
    return max(bisect.bisect_left(stamps, t + 1.0) - i for i, t in enumerate(stamps))


def excess(stamps: list[float], qps: float) -> float:
    """The most requests received within ``t`` seconds beyond ``qps * t``, over every span of
    requests ``i..j`` (a token bucket keeps it at most its burst)."""
    return max(
        j - i + 1 - qps * (stamps[j] - stamps[i]) for i in range(len(stamps)) for j in range(i, len(stamps))
    )


def one_run(cluster: Cluster, server: RealRuntime, objects: int, keda: Module, qps: float) -> Run:
    name = server.name
    node = Node(server, run_watchers=False)
    try:
        runtime = Runtime(
            server, node, kubernetes.config.new_client_from_config_dict(server.admin_kubeconfig())
        )
        runtime.register_crd(KEDA_CRD)
        kyma, _ = kyma_services.kyma_apply(
            namespace="kcp-system",
            name=name,
            modules=[{"name": "keda"}],
            runtime_id=f"rt-{name}",
            skr_domain=f"{name}.kyma.example.com",
        )
        kyma_services.kyma_set_kubeconfig(
            kyma=kyma, kubeconfig=dump_yaml([runtime.control_plane_kubeconfig()])
        )
        module_services.syncresource_apply(kyma=kyma, module=keda, name="bench", manifests=manifests(objects))
        mark = server.audit_mark()
        now = timezone.now()
        queue.flags().claim([kyma.pk], now, now, full=True)
        kyma_reconcile_run(kyma.pk, reason="bench")
        throttled = client_for(kyma.pk, Kyma.objects.get(pk=kyma.pk).kubeconfig).counts.throttled
        stamps = sorted(e.at for e in runtime.control_plane_requests(mark) if e.at)
        if not stamps:
            raise SystemExit("runtime_rate: the API server recorded no request of the control plane")
        return Run(
            requests=len(stamps),
            seconds=stamps[-1] - stamps[0],
            peak_1s=peak(stamps),
            excess=excess(stamps, qps),
            throttled=throttled,
        )
    finally:
        node.close()
        cluster.remove(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--objects", type=int, default=500, help="ConfigMaps in the SyncResource (at most 500)"
    )
    args = parse_args(parser, smoke={"objects": 150})
    qps, burst = settings.RUNTIME_CLIENT_QPS, settings.RUNTIME_CLIENT_BURST
    keda = catalog()
    with Cluster() as cluster:
        started = time.perf_counter()
        # Both runtimes boot side by side; (b)'s waits idle during (a), and each goes after its run.
        servers = [cluster.runtime(name, wait=False) for name in ("limited", "unlimited")]
        for server in servers:
            server.finish_start()
        limited = one_run(cluster, servers[0], args.objects, keda, qps)
        settings.RUNTIME_CLIENT_QPS = 0
        unlimited = one_run(cluster, servers[1], args.objects, keda, qps)
    print(
        f"(a) limited to {qps:g}/s, bursts of {burst}: {limited.requests} requests "
        f"in {limited.seconds:.2f} s, "
        f"{limited.rps:.1f}/s; at most {limited.peak_1s} in one second, at most {limited.excess:.1f} beyond "
        f"{qps:g}/s in any span (the burst: {burst}); {limited.throttled} waited"
    )
    print(
        f"(b) no limit: {unlimited.requests} requests in {unlimited.seconds:.2f} s, {unlimited.rps:.1f}/s; "
        f"at most {unlimited.peak_1s} in one second"
    )
    ratio = limited.seconds / unlimited.seconds if unlimited.seconds else float("inf")
    print(f"({time.perf_counter() - started:.0f} s in all)")
    print(
        f"runtime_rate: objects={args.objects} requests={limited.requests} limited_rps={limited.rps:.1f} "
        f"limited_peak_1s={limited.peak_1s} limited_excess={limited.excess:.1f} "
        f"throttled={limited.throttled} unlimited_rps={unlimited.rps:.1f} "
        f"unlimited_peak_1s={unlimited.peak_1s} "
        f"duration_ratio={ratio:.2f}"
    )
    if limited.excess > burst + SLACK:
        sys.exit(f"runtime_rate: over the limit ({qps:g}/s, bursts of {burst})")


if __name__ == "__main__":
    main()
