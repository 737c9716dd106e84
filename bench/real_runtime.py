"""Reconciles into real kube-apiservers, and the same scenario against the emulator.

N real runtimes (kube-apiserver + kube-controller-manager v1.37 on one etcd, built from source by
``make kube``; envtest/) each get a Kyma with keda and one SyncResource (a ConfigMap), reconciled
under the least-privilege identity of deploy/runtime-access/. It times the first reconcile of all
N (one after the other, in this process), settles them (the watcher Ready, keda reported Ready),
then runs one more periodic reconcile of each as warm-up and one measured, and counts the
control plane's requests of that no-op as each API server saw them: its audit log (reads are get
and list of resources, writes everything else). The same scenario then runs against N emulated
runtimes (runtime_emulator), counted by the emulators. The counts must be equal: a difference is
an emulator bug or a product bug, and the script exits 1 after its last line. As in
bench/fleet.py, the watchers count as alive (heard at registration, ``WATCHER_SILENT_AFTER`` a
day), so a periodic no-op trusts their events. The last line is machine-readable::

    real_runtime: kymas=N first_s=X noop_reads=A noop_writes=B emulator_noop_reads=C emulator_noop_writes=D

(reads and writes per no-op reconcile, averaged over the N Kymas; first_s for all N, real runtimes.)

    python bench/real_runtime.py [--kymas 5] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import keda_module, klm_watcher, setup_django

os.environ.setdefault("WATCHER_SILENT_AFTER", "86400")
setup_django("real-runtime")

import kubernetes
from django.utils import timezone

from envtest.cluster import Cluster
from envtest.node import Node
from envtest.runtime import Runtime
from fleet import queue
from fleet.models import Kyma, Module, ModuleConfig
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from kernel.documents.yamlio import dump_yaml
from pki import services as pki
from reconciler.run import kyma_reconcile_run
from runtime_emulator import EmulatorHost, crd_manifest
from watchers.models import Watcher

CONFIGMAP = (
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keda-config, namespace: kyma-system}\ndata: {a: b}\n"
)
KEDA_CRD = crd_manifest("operator.kyma-project.io", "Keda", versions=("v1alpha1",))


def catalog() -> Module:
    Kyma.objects.all().delete()
    Module.objects.filter(name="keda").delete()
    Watcher.objects.all().delete()
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


def register(name: str, kubeconfig: dict, keda: Module) -> Kyma:
    kyma, _ = kyma_services.kyma_apply(
        namespace="kcp-system",
        name=name,
        modules=[{"name": "keda"}],
        runtime_id=f"rt-{name}",
        skr_domain=f"{name}.kyma.example.com",
    )
    kyma_services.kyma_set_kubeconfig(kyma=kyma, kubeconfig=dump_yaml([kubeconfig]))
    module_services.syncresource_apply(kyma=kyma, module=keda, name="keda-config", manifests=CONFIGMAP)
    Kyma.objects.filter(pk=kyma.pk).update(watcher_last_seen_at=timezone.now())
    return kyma


def reconcile(kyma_id: int, *, periodic: bool = False) -> None:
    now = timezone.now()
    queue.flags().claim([kyma_id], now, now, full=not periodic)
    kyma_reconcile_run(kyma_id, reason=queue.PERIODIC_REASON if periodic else "bench")


def scenario(kymas: list[Kyma], counts: Callable[[], tuple[int, int]]) -> tuple[float, float, float]:
    """first_s, reads and writes per no-op reconcile."""
    started = time.perf_counter()
    for kyma in kymas:
        reconcile(kyma.pk)
    first = time.perf_counter() - started
    for config in ModuleConfig.objects.filter(kyma__in=kymas):
        module_services.moduleconfig_set_status(config=config, status={"state": "Ready"})
    deadline = time.monotonic() + 120
    pending = [k.pk for k in kymas]
    while pending:
        for kyma_id in pending:
            reconcile(kyma_id)
        pending = [k for k in pending if Kyma.objects.get(pk=k).state != "Ready"]
        if pending and time.monotonic() > deadline:
            states = dict(Kyma.objects.filter(pk__in=pending).values_list("name", "state_reason"))
            raise SystemExit(f"real_runtime: Kymas not Ready after 120 s: {states}")
        time.sleep(0.2 if pending else 0)
    for kyma in kymas:
        reconcile(kyma.pk, periodic=True)  # warm-up: what each no-op remembers is in place
    reads_before, writes_before = counts()
    for kyma in kymas:
        reconcile(kyma.pk, periodic=True)
    reads, writes = counts()
    return first, (reads - reads_before) / len(kymas), (writes - writes_before) / len(kymas)


def real(n: int, keda: Module) -> tuple[float, float, float]:
    with Cluster() as cluster:
        nodes: list[Node] = []
        try:
            kymas, servers = [], []
            for i in range(n):
                server = cluster.runtime(f"bench{i}")
                node = Node(server, run_watchers=False)
                nodes.append(node)
                runtime = Runtime(
                    server, node, kubernetes.config.new_client_from_config_dict(server.admin_kubeconfig())
                )
                runtime.register_crd(KEDA_CRD)
                kymas.append(register(f"real-{i}", runtime.control_plane_kubeconfig(), keda))
                servers.append(runtime)

            def counts() -> tuple[int, int]:
                events = [e for rt in servers for e in rt.control_plane_requests() if e.resource]
                return sum(e.read for e in events), sum(e.write for e in events)

            return scenario(kymas, counts)
        finally:
            for node in nodes:
                node.close()


def emulated(n: int, keda: Module) -> tuple[float, float, float]:
    with EmulatorHost() as host:
        runtimes = []
        for i in range(n):
            runtime = host.create(f"emulated-{i}")
            runtime.register_crd(KEDA_CRD)
            runtimes.append(runtime)
        kymas = [register(f"emulated-{i}", rt.kubeconfig(), keda) for i, rt in enumerate(runtimes)]

        def counts() -> tuple[int, int]:
            reads = sum(rt.counts.count("get") + rt.counts.count("list") for rt in runtimes)
            return reads, sum(rt.counts.writes for rt in runtimes)

        try:
            return scenario(kymas, counts)
        finally:
            for runtime in runtimes:
                host.remove(runtime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kymas", type=int, default=5, help="runtimes of each kind (real and emulated)")
    parser.add_argument("--smoke", action="store_true", help="one runtime of each kind (CI: it must not rot)")
    args = parser.parse_args()
    n = 1 if args.smoke else args.kymas
    keda = catalog()
    first, reads, writes = real(n, keda)
    print(f"real runtimes: first reconcile of {n} in {first:.2f} s")
    print(f"real runtimes: per no-op: {reads:.2f} reads, {writes:.2f} writes")
    keda = catalog()
    _, emulator_reads, emulator_writes = emulated(n, keda)
    print(f"emulated runtimes: per no-op: {emulator_reads:.2f} reads, {emulator_writes:.2f} writes")
    print(
        f"real_runtime: kymas={n} first_s={first:.2f} noop_reads={reads:g} noop_writes={writes:g} "
        f"emulator_noop_reads={emulator_reads:g} emulator_noop_writes={emulator_writes:g}"
    )
    if (reads, writes) != (emulator_reads, emulator_writes):
        # The emulator stands in for real runtimes in every other benchmark: its no-op must cost the same.
        sys.exit("real_runtime: the emulator's no-op reconcile costs differ from a real API server's")


if __name__ == "__main__":
    main()
