"""The fleet dashboard page: reads the overview, turns every figure into a link to the admin
list that shows exactly those objects, renders. No logic beyond presentation."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from access.scope import is_scoped, scope_of, scoped
from fleet.models import Job, KymaState, RolloutState
from fleet.rollouts.selectors import rollouts_under_way
from fleet.selectors import watcher_silent_after

from . import selectors
from .charts import BarChart, bar_chart
from .display import DURATION_COLUMN, job_outcome_text, job_status_badge
from .readable import readable_error


def changelist(model: str, **params: Any) -> str:
    """``changelist("controlplane_kyma", state__exact="Error")`` → the filtered admin list."""
    url = reverse(f"admin:{model}_changelist")
    return f"{url}?{urlencode(params)}" if params else url


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat()


def _minute_chart(values: list[int], window: selectors.Window, model: str, column: str) -> BarChart:
    minutes = [window.minute(index) for index in range(window.minutes)]
    return bar_chart(
        values,
        labels=[f"{minute:%H:%M}" for minute in minutes],
        urls=[
            changelist(
                model,
                **{
                    f"{column}__gte": _iso(minute),
                    f"{column}__lt": _iso(minute + dt.timedelta(minutes=1)),
                },
            )
            for minute in minutes
        ],
    )


def failing_groups(overview: selectors.FleetOverview) -> list[dict[str, Any]]:
    """Each reason with its count, one sentence, the link to all its Kymas, and the newest few."""
    return [
        {
            "reason": group.reason or "(no reason recorded)",
            "count": group.count,
            "more": group.count - len(group.kymas),
            "sentence": readable_error(group.reason, "").sentence,
            "url": changelist("controlplane_kyma", state__exact=KymaState.ERROR, reason=group.reason)
            if group.reason
            else changelist("controlplane_kyma", state__exact=KymaState.ERROR),
            "rows": [
                {"runtime": row, "problem": readable_error(row.reason, row.message)} for row in group.kymas
            ],
        }
        for group in overview.failing_groups
    ]


def fleet_context(overview: selectors.FleetOverview) -> dict[str, Any]:
    """The figures of the overview, each paired with the link to its list."""
    window = overview.window
    since = _iso(window.start)
    states = [
        {
            "state": state or "New",
            "label": label,
            "count": overview.states.get(state, 0),
            "url": changelist("controlplane_kyma", state__exact=state),
        }
        for state, label in KymaState.choices
    ]
    return {
        "overview": overview,
        "states": states,
        "links": {
            "kymas": changelist("controlplane_kyma"),
            "errors": changelist("controlplane_kyma", state__exact=KymaState.ERROR),
            "silent": changelist("controlplane_kyma", watcher="silent"),
            "never": changelist("controlplane_kyma", watcher="never"),
            "expiring": changelist("pki_certificate", attention="expiring"),
            "overdue": changelist("pki_certificate", attention="overdue"),
            "events": changelist("listener_watcheventrecord", received_at__gte=since),
            "reconciles": changelist("controlplane_reconcilerecord", started_at__gte=since),
            "slowest": changelist(
                "controlplane_reconcilerecord", started_at__gte=since, o=f"-{DURATION_COLUMN}"
            ),
            "failed_reconciles": changelist(
                "controlplane_reconcilerecord", started_at__gte=since, state=KymaState.ERROR
            ),
            "jobs": changelist("controlplane_job"),
            "rollouts": changelist("controlplane_rollout"),
            "halted_rollouts": changelist("controlplane_rollout", state=RolloutState.HALTED),
            "running_jobs": changelist("controlplane_job", status__exact="running"),
        },
        "events_chart": _minute_chart(overview.events, window, "listener_watcheventrecord", "received_at"),
        "reconciles_chart": _minute_chart(
            overview.reconciles, window, "controlplane_reconcilerecord", "started_at"
        ),
        "reconciles_per_minute": round(overview.reconciles_total / window.minutes, 1),
        "events_per_minute": round(overview.events_total / window.minutes, 1),
        "silent_after": int(watcher_silent_after().total_seconds()),
        "failing_groups": failing_groups(overview),
        "jobs": [
            {"job": job, "status": job_status_badge(job), "outcome": job_outcome_text(job)}
            for job in overview.jobs
        ],
    }


def rollouts_context(narrow: selectors.Narrow = selectors.everything) -> dict[str, Any]:
    """Rollouts under way (halted and paused first), with the halted count for the card."""
    rows = rollouts_under_way(narrow=narrow)
    return {
        "rollouts": rows,
        "rollouts_halted": sum(1 for row in rows if row.rollout.state == RolloutState.HALTED),
    }


def fleet_dashboard(request: HttpRequest) -> TemplateResponse:
    """Staff only (the admin's login wraps it) and only for those who may see Kymas; a scoped
    user's figures count only its Kymas (and its own jobs), and link to lists scoped alike."""
    if not request.user.has_perm("controlplane.view_kyma"):
        raise PermissionDenied
    user = request.user

    def narrow(queryset: QuerySet) -> QuerySet:
        return scoped(user, queryset)

    jobs = Job.objects.filter(created_by=user) if is_scoped(user) else None
    context = {
        **admin.site.each_context(request),
        "title": "Fleet dashboard",
        **fleet_context(selectors.fleet_overview(narrow=narrow, jobs=jobs, whole_fleet=not is_scoped(user))),
        **rollouts_context(narrow),
        "scope": scope_of(user).describe() if is_scoped(user) else "",
    }
    return TemplateResponse(request, "dashboard/fleet.html", context)
