"""Beat's election under SIGKILL: how long the fleet goes without a leading beat.

Runs ``--beats`` celery beat processes (the production scheduler, controlplane/beat.py) with the
sweep every ``--sweep`` seconds, then ``--kills`` times: SIGKILL the beat that leads (a node lost:
no release, its lease must run out), measure until another takes the lease (the takeover, read
from the lease row every 20 ms) and until the new leader's first sweep is in the queue, and start
the killed one again. Then once more, back to back: the leader is killed, and its successor the
moment it takes over (with three beats, so one is left): how long the fleet goes without a
leader then (``double_s``, two leases in a row at most). Every sweep message carries the lease
term and the tick it claimed; at the end they are checked: no tick sent twice, and the longest gap
between two sweeps against the longest takeover. Goal: every takeover within 5 s (the defaults:
``BEAT_LEASE_SECONDS`` 4 plus a poll of ``BEAT_STANDBY_POLL`` 0.5), no tick twice. The last line
is::

    beat_takeover: kills=K takeover_p50_s=A takeover_max_s=B first_sweep_max_s=C duplicates=D
    longest_gap_s=E double_s=F  (one line)

    python bench/beat_takeover.py [--kills 10] [--beats 2] [--lease S] [--poll S] [--sweep 2] [--smoke]

Use BENCH_DATABASE_URL (PostgreSQL) and BENCH_BROKER_URL (Redis) for production-like figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import os
import signal
import statistics
import subprocess
import sys
import time
from queue import Empty

from common import parse_args, setup_django, spawn, state_dir, stop_processes

if os.environ.get("BENCH_BROKER_URL"):
    os.environ["CELERY_BROKER_URL"] = os.environ["BENCH_BROKER_URL"]
setup_django("beat-takeover")

from django.conf import settings
from django.utils import timezone

from controlplane.beat import LEASE_NAME
from controlplane.celery import app
from controlplane.leases import lease_current, lease_is_live
from controlplane.models import Lease

SWEEP = "reconcile-due"


def start_beat(number: int, args: argparse.Namespace) -> subprocess.Popen:
    log = open(state_dir() / f"beat-{number}.log", "a")  # noqa: SIM115 - the child's output
    try:
        return spawn(
            [sys.executable, "-m", "celery", "-A", "controlplane", "beat", "--loglevel", "INFO"],
            env={
                **os.environ,
                **({"BEAT_LEASE_SECONDS": str(args.lease)} if args.lease else {}),
                **({"BEAT_STANDBY_POLL": str(args.poll)} if args.poll else {}),
                "RECONCILE_SWEEP_INTERVAL": str(args.sweep),
                "LOG_LEVEL": "INFO",
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()


def standing_by(number: int) -> int:
    """How often this beat's log says it stands by (it is up and watching the lease)."""
    log = state_dir() / f"beat-{number}.log"
    return log.read_text(errors="replace").count("standing by; beat") if log.exists() else 0


def leader() -> tuple[str, int] | None:
    lease = lease_current(LEASE_NAME)
    if lease is None or not lease_is_live(lease, timezone.now()):
        return None
    return lease.holder, lease.term


def drain() -> list[dict]:
    """The headers of every sweep message waiting in the queue (taken off it)."""
    found = []
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue("controlplane")
        try:
            while True:
                try:
                    message = queue.get(block=False)
                except Empty:
                    break
                if message.headers.get("periodic_task_name") == SWEEP:
                    found.append(dict(message.headers))
                message.ack()
        finally:
            queue.close()
    return found


def wait(condition, what: str, timeout: float, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(step)
    raise TimeoutError(f"{what} did not happen within {timeout:.0f} s (logs in {state_dir()})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=10, help="times the leading beat is killed")
    parser.add_argument("--beats", type=int, default=2, help="beat processes")
    parser.add_argument(
        "--lease", type=float, default=None, help="BEAT_LEASE_SECONDS (default: the setting's)"
    )
    parser.add_argument("--poll", type=float, default=None, help="BEAT_STANDBY_POLL (default: the setting's)")
    parser.add_argument("--sweep", type=float, default=2.0, help="RECONCILE_SWEEP_INTERVAL")
    args = parse_args(parser, smoke={"kills": 1, "sweep": 0.5, "lease": 2.0, "poll": 0.25})
    lease = args.lease or settings.BEAT_LEASE_SECONDS
    poll = args.poll or settings.BEAT_STANDBY_POLL
    print(
        f"broker: {os.environ.get('CELERY_BROKER_URL', 'filesystem')}; {args.beats} beats, lease "
        f"{lease:g} s, standby poll {poll:g} s, sweep every {args.sweep:g} s; {args.kills} kills, then "
        f"two back to back; load average {os.getloadavg()[0]:.2f}"
    )
    Lease.objects.filter(name=LEASE_NAME).delete()
    drain()
    for number in range(args.beats + 1):  # (the last one: the third beat of the double kill)
        (state_dir() / f"beat-{number}.log").unlink(missing_ok=True)
    beats = {number: start_beat(number, args) for number in range(args.beats)}
    takeovers: list[float] = []
    first_sweeps: list[float] = []
    sent: list[dict] = []

    def swept_in(term: int) -> bool:
        """Whether a sweep of this lease term is in the queue (what is there is kept in ``sent``)."""
        sent.extend(drain())
        return any(int(headers["beat_term"]) == term for headers in sent)

    def sweeps_of(term: int) -> int:
        """How many sweeps of this lease term were sent (what is in the queue is kept in ``sent``)."""
        sent.extend(drain())
        return sum(int(headers["beat_term"]) == term for headers in sent)

    def kill_leader(holder: str, term: int) -> tuple[int, float, tuple[str, int]]:
        """SIGKILL the beat holding the lease; (its number, when, the next leader) once one took it."""
        number = next(n for n, proc in beats.items() if holder.endswith(f":{proc.pid}"))
        beats[number].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        beats[number].wait(10)
        found = wait(lambda t=term: (found := leader()) and found[1] > t and found, "a takeover", 60)
        return number, killed, found

    def restart(number: int) -> None:
        """Start a killed beat again, once it stands by (as Kubernetes restarts a lost pod)."""
        stop_processes([beats[number]], timeout=1)
        standing = standing_by(number)
        beats[number] = start_beat(number, args)
        wait(
            lambda n=number, seen=standing: standing_by(n) > seen, "the restarted beat standing by", 120, 0.1
        )

    double = 0.0
    try:
        holder, term = wait(leader, "a beat leading", 120)
        for kill in range(args.kills):
            wait(lambda term=term: swept_in(term), "a sweep of the leader", 30)
            number, killed, (holder, term) = kill_leader(holder, term)
            takeovers.append(time.monotonic() - killed)
            wait(lambda term=term: swept_in(term), "the new leader's first sweep", 30)
            first_sweeps.append(time.monotonic() - killed)
            print(
                f"kill {kill + 1}: lease taken over after {takeovers[-1]:5.2f} s, first sweep of the new "
                f"leader after {first_sweeps[-1]:5.2f} s (term {term}, {holder})"
            )
            if kill == args.kills - 1:  # the third beat of the double kill starts beside the restart
                beats[args.beats] = start_beat(args.beats, args)
            restart(number)
        # Back to back: a third beat stands by, the leader dies, then its successor as it takes over.
        if args.beats not in beats:
            beats[args.beats] = start_beat(args.beats, args)
        wait(lambda: standing_by(args.beats) > 0, "the third beat standing by", 120, 0.1)
        wait(lambda term=term: swept_in(term), "a sweep of the leader", 30)
        _, killed, (holder, term) = kill_leader(holder, term)
        _, _, (holder, term) = kill_leader(holder, term)
        double = time.monotonic() - killed
        print(f"leader and successor killed back to back: a leader again after {double:5.2f} s (term {term})")
        wait(lambda term=term: swept_in(term), "the third leader's first sweep", 30)
        # The last leader's next two ticks, for the gap check.
        wait(lambda term=term: sweeps_of(term) >= 3, "the third leader's next sweeps", 30)
    finally:
        stop_processes(list(beats.values()))
    runs = sorted(dt.datetime.fromisoformat(h["beat_run_at"]) for h in sent if h.get("beat_run_at"))
    duplicates = len(runs) - len(set(runs))
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(runs)]
    longest = max(gaps) if gaps else 0.0
    bound = max(*takeovers, double)
    print(
        f"\n{len(sent)} sweeps sent by {len({h['beat_term'] for h in sent})} leaders; ticks sent twice: "
        f"{duplicates}; longest gap between sweeps {longest:.2f} s (a takeover plus the sweep interval "
        f"{args.sweep:g} s at most: {'yes' if longest <= bound + args.sweep + 0.5 else 'NO'})"
    )
    print(
        f"takeover p50 {statistics.median(takeovers):.2f} s, max {max(takeovers):.2f} s "
        f"(goal <= 5 s: {'yes' if max(takeovers) <= 5 else 'NO'}); every takeover: "
        + ", ".join(f"{t:.1f}" for t in takeovers)
        + f"; load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"beat_takeover: kills={args.kills} takeover_p50_s={statistics.median(takeovers):.2f} "
        f"takeover_max_s={max(takeovers):.2f} first_sweep_max_s={max(first_sweeps):.2f} "
        f"duplicates={duplicates} longest_gap_s={longest:.2f} double_s={double:.2f}"
    )


if __name__ == "__main__":
    main()
