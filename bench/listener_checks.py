"""What each of the listener's checks costs per WatchEvent, in microseconds of one core.

The listener refuses hostile input with a precise 400 (docs/contributors/watchevent.md): a body of
at most 16 KiB, JSON whose numbers and nesting are bounded and whose text any database stores,
field names matched case-insensitively as upstream's Go listener matches them (a name given twice
in two spellings is refused), strings where strings belong, a ``change`` whose tokens are short
and plain, names the runtime could have stored. This prints the cost of each of those checks on
its own, the parts of the accept path around them, and the whole WSGI application per event
in-process (no network, no TLS: what ``bench/listener.py`` adds over its bare TLS hello), for the
two bodies senders send: upstream's (no ``change``) and our runtime watcher's (with one).

Each figure is this thread's CPU time, the best of ``--repeat`` timings of ``--number`` calls (the
machine's noise only adds), with the collector on as in the server (whose start-up heap is
frozen, listener/wsgi.py).
The whole application is timed for an event its queued reconcile covers (no queue round trip:
``bench/listener.py`` row (a')); an event that asks the queue adds one Redis round trip, shared
by concurrent events (``fleet/queue/batching.py``). The whole application sends the same body
each time, as a runtime's watcher does: its parse is remembered after the first
(``listener.events.parse_event_cached``); the parse rows show what a body new to the process costs.

The last line is ``listener_checks: app_us=A parse_us=P checks_us=C`` for upstream's body: the
whole application, the parse with every check, and the sum of the checks alone.

    python bench/listener_checks.py [--number 20000] [--repeat 5] [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import time
from collections.abc import Callable

from common import parse_args, setup_django

# Every event of this run is covered by its queued reconcile: the application is timed without
# the queue round trip (as bench/listener.py's row (a')).
os.environ["LISTENER_RECONCILE_DELAY"] = "3600"
os.environ.setdefault("RECONCILE_FLAGS_PREFIX", f"bench-checks-{os.getpid()}")
if os.environ.get("BENCH_BROKER_URL"):
    os.environ["CELERY_BROKER_URL"] = os.environ["BENCH_BROKER_URL"]
setup_django("listener-checks")

from django.utils import timezone

from fleet.models import Kyma
from kernel.documents import nesting
from listener import app, events, identity, metrics, services
from listener.identity import ClientIdentity
from listener.recorder import EventRecorder
from pki import services as pki

UPSTREAM = {
    "watched": {"Namespace": "kyma-system", "Name": "default"},
    "watchedGvk": {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"},
}
OURS = {
    **UPSTREAM,
    "change": {
        "operation": "UPDATE",
        "uid": "0d6f2c2e-4b8a-4c4e-9a43-2f1e8c1b7a55",
        "oldResourceVersion": "48213",
    },
}
PATH = "/v2/lifecycle-manager/event"


class Connection:
    """What gunicorn hands the application as ``gunicorn.socket``: the peer's identity is kept on
    it after the connection's first request (listener/identity.py)."""

    controlplane_identity: ClientIdentity


def prepare() -> tuple[Kyma, ClientIdentity]:
    """A Kyma and its runtime's identity (no Watcher needed: lifecycle-manager events are routed
    without one)."""
    pki.ca_bootstrap()
    kyma, _ = Kyma.objects.update_or_create(
        name="bench-checks",
        defaults={"runtime_id": "rt-bench-checks", "skr_domain": "bench-checks.kyma.example.com"},
    )
    return kyma, ClientIdentity(kyma.runtime_id, (kyma.skr_domain,), "-", "")


def timed(call: Callable[[], object], number: int, repeat: int) -> float:
    """Microseconds of this thread's CPU per call (time waiting for Redis or PostgreSQL is not
    counted; time other processes took from it neither): the best of ``repeat`` runs of
    ``number`` calls, collector on."""
    best = float("inf")
    for _ in range(repeat):
        started = time.thread_time()
        for _ in range(number):
            call()
        best = min(best, time.thread_time() - started)
    return best / number * 1e6


def measure(document: dict, kyma: Kyma, who: ClientIdentity, args: argparse.Namespace) -> dict[str, float]:
    body = json.dumps(document).encode()
    data = json.loads(body)
    event = events.parse_event("v2", "lifecycle-manager", body)
    connection = Connection()
    connection.controlplane_identity = who
    recorder = EventRecorder()
    recorder._pid = os.getpid()  # no flush thread: only what the request path pays
    tally = metrics.Tally()
    tally._pid = os.getpid()
    now = timezone.now()

    def environ() -> dict:
        return {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": PATH,
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            "gunicorn.socket": connection,
        }

    def tally_one() -> None:
        tally.begin()
        tally.event("lifecycle-manager", "coalesced")
        tally.end("v2", 200, 0.001)

    def parse_checked_fields() -> None:
        events.fields(data, ("watched", "watchedGvk", "owner", "change"), "")
        events.fields(data["watched"], ("namespace", "name"), "watched.")
        events.fields(data["watchedGvk"], ("group", "version", "kind"), "watchedGvk.")
        if "change" in data:
            events.fields(data["change"], ("operation", "uid", "oldResourceVersion"), "change.")

    checks: dict[str, Callable[[], object]] = {
        "body size (16 KiB)": lambda: app.read_body(environ()),
        "numbers, constants, escapes (JSON hooks)": lambda: nesting.json_loads(body, source="body"),
        "nesting and text walk (only with \\u or 100 brackets)": lambda: nesting.check_nesting(data),
        "field names, case-insensitive (every level)": parse_checked_fields,
        "strings and required fields (watched)": lambda: events.object_key(
            data["watched"], "watched", name_required=True
        ),
        "change: operation, uid, version tokens": (lambda: events._change(data["change"]))
        if "change" in data
        else None,
        "names the runtime could store (stored_change)": lambda: services.stored_change(event),
        "client certificate (kept per connection)": lambda: identity.client_identity(
            {"gunicorn.socket": connection}
        ),
        "runtime and SAN pinning": lambda: services.runtime_for(None, who),
    }
    parts: dict[str, Callable[[], object]] = {
        "JSON parse alone (json.loads, for scale)": lambda: json.loads(body),
        "parse_event: parse and every check": lambda: events.parse_event("v2", "lifecycle-manager", body),
        "the same body again (remembered: parse_event_cached)": lambda: events.parse_event_cached(
            "v2", "lifecycle-manager", bytes(body)
        ),
        "event record (buffered)": lambda: recorder.add(kyma.pk, event, "coalesced", now),
        "request metrics (summed in the process)": tally_one,
        "the whole application, one event": lambda: app.application(environ(), lambda status, headers: None),
    }
    services.COVERAGE.request(kyma.pk, None)  # the queued reconcile that covers the events below
    found = {}
    for label, call in {**checks, **parts}.items():
        if call is not None:
            found[label] = timed(call, args.number, args.repeat)
    # The checks' own cost: each check's row, except that the JSON row counts only what the hooks
    # and scans add to a plain parse (a body has to be parsed anyway).
    hooks, walk = (
        "numbers, constants, escapes (JSON hooks)",
        "nesting and text walk (only with \\u or 100 brackets)",
    )
    walked = b"\\u" in body or body.count(b"{") + body.count(b"[") >= nesting.MAX_DEPTH
    found["checks"] = sum(
        found[label]
        for label, call in checks.items()
        if call is not None and label != hooks and (label != walk or walked)
    )
    found["checks"] += max(0.0, found[hooks] - found["JSON parse alone (json.loads, for scale)"])
    print(f"{len(body)} bytes: " + json.dumps(document, separators=(",", ":"))[:80] + "...")
    for label, value in found.items():
        if label == walk and not walked:
            print(f"  {label:58s} {value:7.2f} us  (not run for this body)")
        elif label == "the whole application, one event" and "change" in data:
            print(f"  {label:58s} {value:7.2f} us  (it asks the queue: a Redis round trip)")
        elif label != "checks":
            print(f"  {label:58s} {value:7.2f} us")
    print(f"  {'the checks alone (hooks over plain JSON, and the rest)':58s} {found['checks']:7.2f} us\n")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--number", type=int, default=20000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings per figure (the best counts)")
    args = parse_args(parser, smoke={"number": 200, "repeat": 1})
    kyma, who = prepare()
    gc.collect()
    gc.freeze()  # as the listener's processes do (listener/wsgi.py)
    print(f"load average {os.getloadavg()[0]:.2f}; best of {args.repeat} x {args.number} calls\n")
    upstream = measure(UPSTREAM, kyma, who, args)
    measure(OURS, kyma, who, args)
    print(
        f"listener_checks: app_us={upstream['the whole application, one event']:.1f} "
        f"parse_us={upstream['parse_event: parse and every check']:.1f} checks_us={upstream['checks']:.1f}"
    )


if __name__ == "__main__":
    main()
