"""Which maintenance window a runtime has, and whether it is open: the policy in force, applied.

The policy is the admin's (:class:`fleet.models.MaintenancePolicy`) when one is saved, else the
file ``MAINTENANCE_POLICY_FILE`` (read again when it changes), else none. Like upstream, a module
version that requires downtime cannot reach an existing installation while no policy says when
(the module reports it); everything else never asks. A page or a rollout asks for the window a
runtime is in, or the next one to open.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from dataclasses import dataclass

from django.conf import settings

from fleet.models import Kyma
from fleet.models.maintenance import MaintenancePolicy, runtime_attributes
from kernel.documents.maintenance import Policy, PolicyError, ResolvedWindow, parse_policy, read_policy_file

NO_POLICY = "no maintenance-window policy is configured (admin, or MAINTENANCE_POLICY_FILE)"


@dataclass(frozen=True)
class PolicyInForce:
    policy: Policy | None
    source: str  # "admin", the file's path, or "" (none)
    problem: str = ""  # why there is none (a broken file: its error)


_file_cache: dict[str, tuple[float, PolicyInForce]] = {}
_file_lock = threading.Lock()


def _from_file(path: str) -> PolicyInForce:
    try:
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        return PolicyInForce(
            None, path, f"MAINTENANCE_POLICY_FILE: cannot read {path}: {exc.strerror or exc}"
        )
    with _file_lock:
        cached = _file_cache.get(path)
        if cached is not None and cached[0] == mtime:
            return cached[1]
    try:
        found = PolicyInForce(read_policy_file(path), path)
    except PolicyError as exc:
        found = PolicyInForce(None, path, f"MAINTENANCE_POLICY_FILE: {exc}")
    with _file_lock:
        _file_cache[path] = (mtime, found)
    return found


def policy_in_force() -> PolicyInForce:
    """The admin's policy, else the file's, else none (one query)."""
    stored = MaintenancePolicy.objects.filter(name="default").values_list("policy", flat=True).first()
    if stored is not None:
        try:
            return PolicyInForce(parse_policy(stored), "admin")
        except PolicyError as exc:  # written around the validation
            return PolicyInForce(None, "admin", f"the admin's maintenance-window policy: {exc}")
    if settings.MAINTENANCE_POLICY_FILE:
        return _from_file(settings.MAINTENANCE_POLICY_FILE)
    return PolicyInForce(None, "", NO_POLICY)


def min_size() -> dt.timedelta:
    return dt.timedelta(seconds=settings.MAINTENANCE_WINDOW_MIN_SIZE)


@dataclass(frozen=True)
class WindowState:
    """A runtime's window now: ``open`` (the window it is in), else the next one (``upcoming``);
    ``problem`` when no policy can say."""

    open: ResolvedWindow | None
    upcoming: ResolvedWindow | None
    problem: str = ""

    @property
    def is_open(self) -> bool:
        return self.open is not None


def window_of(kyma: Kyma, now: dt.datetime, policy: PolicyInForce | None = None) -> WindowState:
    """The runtime's window now (``policy``: the one in force, when the caller has it already)."""
    policy = policy if policy is not None else policy_in_force()
    if policy.policy is None:
        return WindowState(None, None, policy.problem or NO_POLICY)
    runtime = runtime_attributes(kyma.labels, kyma.annotations)
    active = policy.policy.active(runtime, now, min_size())
    if active is not None:
        return WindowState(active, active)
    upcoming = policy.policy.resolve(runtime, now)
    problem = "" if upcoming is not None else "the maintenance-window policy gives this runtime no window"
    return WindowState(None, upcoming, problem)
