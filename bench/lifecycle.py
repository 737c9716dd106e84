"""A year of certificates in minutes: the installed control plane renews and rotates its own PKI
while its runtimes keep sending events.

The control plane is installed as an SRE installs it (``envtest.install``: deploy/'s example
overlay on a real kube-apiserver, the pods run by the node stand-in, three real runtimes
(``--runtimes``), the Istio gateway's stand-in in front of the listener; ``--smoke`` installs one
runtime and one replica of each role), with the PKI's lifetimes shortened by its own
settings to seconds instead of days (this benchmark only): runtime and listener certificates live
``--cert-seconds`` and are renewed halfway, the CA lives ``--ca-seconds`` and rotates
``--rotate-before`` seconds before it expires, the server certificate switches to a new CA
``--grace`` seconds after it joined. Meanwhile a user edits every runtime's Kyma once a second.

What it watches, from outside: the gateway's Secret (its CAs and its server certificate, which the
workers write), each runtime's ``skr-webhook-tls`` Secret (the watcher's client certificate the
reconciles deliver), the runtime watchers' own counters, and the reconcile records. It runs until
the CA rotated ``--rotations`` times and every certificate was renewed ``--renewals`` times (or
``--limit`` minutes pass), lets the watchers' queues drain, and ends with::

    lifecycle: minutes=M ca_rotations=R renewals=N events=E failed_events=F failed_reconciles=G

R: CAs that joined the gateway's bundle after the first; N: the fewest renewals any certificate
had (the gateway's, each runtime's); E: edits made; F: edits whose event never reached the
listener (edits less events accepted less events merged into one pending; plus events the watchers
dropped); G: reconciles that ended in Error. Goals: F = 0, G = 0, R >= 3.

    python bench/lifecycle.py [--rotations 3] [--renewals 10] [--runtimes 3] [--replicas 2] [--smoke]
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import parse_args

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg

from envtest.install import (
    POSTGRES,
    Edits,
    Installation,
    Release,
    events_outcome,
    gateway_stats,
    wait_for,
)
from pki import crypto

DAY = 86400.0


def site(args: argparse.Namespace) -> dict[str, str]:
    """The PKI in seconds (as fractions of the settings' days), and what checks it that often."""
    return {
        "PKI_CERT_VALIDITY_DAYS": f"{args.cert_seconds / DAY:.9f}",
        "PKI_CERT_RENEW_BEFORE_DAYS": f"{args.cert_seconds / 2 / DAY:.9f}",
        "PKI_CA_VALIDITY_DAYS": f"{args.ca_seconds / DAY:.9f}",
        "PKI_CA_ROTATE_BEFORE_DAYS": f"{args.rotate_before / DAY:.9f}",
        "PKI_CA_GRACE_DAYS": f"{args.grace / DAY:.9f}",
        "PKI_MAINTAIN_INTERVAL": "2",
        "GATEWAY_SECRET_INTERVAL": "5",
        "LISTENER_TLS_REFRESH": "2",
        "RECONCILE_READY_INTERVAL": "15",
        "RECONCILE_RECORDS_KEPT": "100000",
    }


def fingerprints(pem: bytes) -> list[str]:
    return [crypto.fingerprint_sha256(c) for c in crypto.load_certificates(pem)]


class Observer:
    """Counts what changed, one look a second: CAs in the gateway's bundle, its server
    certificate, each runtime's watcher certificate."""

    def __init__(self, installed: Installation) -> None:
        self.installed = installed
        self.cas: list[str] = []
        self.seen: dict[str, list[str]] = {}  # certificate -> fingerprints, in order

    def look(self) -> None:
        gateway = self.installed.get("secret", "kcp-listener-gateway-tls", "istio-system")
        if gateway:
            data = {k: base64.b64decode(v) for k, v in gateway["data"].items()}
            for fingerprint in fingerprints(data["ca.crt"]):
                if fingerprint not in self.cas:
                    self.cas.append(fingerprint)
            self._note("gateway", fingerprints(data["tls.crt"])[0])
        for installed in self.installed.installed_runtimes:
            secret = installed.runtime.get("v1", "secrets", "skr-webhook-tls", "kyma-system")
            if secret:
                self._note(installed.name, fingerprints(base64.b64decode(secret["data"]["tls.crt"]))[0])

    def _note(self, name: str, fingerprint: str) -> None:
        history = self.seen.setdefault(name, [])
        if not history or history[-1] != fingerprint:
            history.append(fingerprint)

    @property
    def rotations(self) -> int:
        return max(0, len(self.cas) - 1)

    @property
    def renewals(self) -> int:
        names = ["gateway", *(r.name for r in self.installed.installed_runtimes)]
        return min((len(self.seen.get(name, [])) - 1 for name in names), default=0)


def failed_reconciles(installed: Installation, since: float) -> int:
    with psycopg.connect(f"postgresql://postgres@{POSTGRES}/{installed.database}") as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM controlplane_reconcilerecord"
            " WHERE state = 'Error' AND started_at >= to_timestamp(%s)",
            [since],
        ).fetchone()  # type: ignore[misc]
    return int(count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rotations", type=int, default=3, help="CA rotations to see (default 3)")
    parser.add_argument("--renewals", type=int, default=10, help="renewals of every certificate (default 10)")
    parser.add_argument("--cert-seconds", type=float, default=40, help="life of a leaf certificate")
    parser.add_argument("--ca-seconds", type=float, default=150, help="life of a CA")
    parser.add_argument(
        "--rotate-before", type=float, default=70, help="rotate the CA this long before its end"
    )
    parser.add_argument(
        "--grace", type=float, default=15, help="seconds before the server certificate switches"
    )
    parser.add_argument("--limit", type=float, default=30, help="minutes at most")
    parser.add_argument("--runtimes", type=int, default=3, help="runtimes (real API servers) registered")
    parser.add_argument(
        "--replicas", type=int, default=0, help="each role's replicas (0: the example overlay's, two)"
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the working directory (every process's and API server's log)",
    )
    args = parse_args(
        parser,
        smoke={
            "rotations": 1,
            "renewals": 1,
            "cert_seconds": 40,
            "ca_seconds": 90,
            "rotate_before": 60,
            "grace": 10,
            "limit": 6,
            # (every path runs with one of each: three runtimes and two of every role are the
            # full run's, an API server and a Django process more each, on 2 cores)
            "runtimes": 1,
            "replicas": 1,
        },
    )
    workdir = Path(tempfile.mkdtemp(prefix="lifecycle-"))
    try:
        run(args, workdir)
    finally:
        if args.keep:
            print(f"working directory kept: {workdir}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def run(args: argparse.Namespace, workdir: Path) -> None:
    redis_db = int(os.environ.get("LIFECYCLE_REDIS_DB", "14"))
    with Installation(
        workdir,
        Release(ROOT, "0.1.0"),
        runtimes=args.runtimes,
        replicas=args.replicas,
        redis_db=redis_db,
        site=site(args),
    ) as installed:
        web = installed.session()
        installed.register_runtimes(web)

        def ready() -> bool:
            kymas = web.get("/api/v1/kymas/")["results"]
            return len(kymas) == args.runtimes and all(
                (k.get("status") or {}).get("state") == "Ready" for k in kymas
            )

        wait_for(ready, timeout=600, what="the Kymas Ready")
        observer = Observer(installed)
        gateway_before = gateway_stats(installed)
        started = time.time()
        edits = Edits(installed)
        editor = threading.Thread(target=edits.run, daemon=True)
        editor.start()
        deadline = time.monotonic() + args.limit * 60
        try:
            while time.monotonic() < deadline:
                observer.look()
                if observer.rotations >= args.rotations and observer.renewals >= args.renewals:
                    break
                time.sleep(1)
        finally:
            edits.stop.set()
            editor.join(10)
        for error in edits.errors[:10]:
            print(f"edit failed: {error}", flush=True)

        outcome = events_outcome(installed, edits.made, started, gateway_before)
        minutes = (time.time() - started) / 60
        renewals = {k: len(v) - 1 for k, v in observer.seen.items()}
        print(f"renewals by certificate: {renewals}; {outcome.line()}", flush=True)
        print(
            f"lifecycle: minutes={minutes:.1f} ca_rotations={observer.rotations} "
            f"renewals={observer.renewals} events={edits.made} failed_events={outcome.lost} "
            f"failed_reconciles={failed_reconciles(installed, started)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
