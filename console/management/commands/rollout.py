"""``manage.py rollout status [NAME] | pause NAME | resume NAME | abort NAME | rollback NAME``.

``status`` without a name lists the rollouts under way (and the last few finished); with one, it
shows where that rollout stands: its change, each wave's progress, the current wave's gate and
runtimes (failing and waiting first), why it halted and its timeline. The actions are the same
services as the admin's buttons and the API's (a refused action is one line and exit code 1),
recorded in the audit trail as the operating-system user's, a refused one with its reason.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Rollout
from fleet.rollouts import selectors
from fleet.rollouts import services as rollout_services
from kernel import audit
from kernel.errors import ApplicationError
from kernel.timefmt import display

ACTIONS = {
    "pause": rollout_services.rollout_pause,
    "resume": rollout_services.rollout_resume,
    "abort": rollout_services.rollout_abort,
    "rollback": rollout_services.rollout_rollback,
}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def status_lines(rollout: Rollout) -> list[str]:
    page = selectors.rollout_page(rollout)
    lines = [
        f"Rollout:   {rollout.name} ({rollout.kind}, {'by its change' if rollout.automatic else 'by hand'})",
        f"Change:    {page.description}",
        f"State:     {rollout.state}" + (f" - {rollout.message}" if rollout.message else ""),
        f"Runtimes:  {rollout.runtimes}, {page.changed} changed ({page.percent_changed} %)",
        f"Created:   {display(rollout.created_at)}",
    ]
    if rollout.halted_reason:
        lines.append(f"Halted:    {rollout.halted_reason}")
    if rollout.superseded_by_id:
        lines.append(f"Superseded by: {rollout.superseded_by.name}")
    lines.append("Waves:")
    lines += [
        "  " + line
        for line in _table(
            ["#", "NAME", "SIZE", "SELECTOR", "RUNTIMES", "CHANGED", "STATES"],
            [
                [
                    f"{wave.index + 1}{' *' if wave.current else ''}",
                    wave.name,
                    wave.size,
                    wave.selector or "-",
                    str(wave.runtimes),
                    str(wave.changed),
                    ", ".join(f"{state} {n}" for state, n in sorted(wave.counts.items())) or "-",
                ]
                for wave in page.waves
            ],
        )
    ]
    gate = page.gate
    if gate is not None:
        lines.append(
            f"Gate:      wave {rollout.wave_label()}: {gate.ready} Ready, {gate.failed} failed of "
            f"{gate.counted} counted (at most {gate.allowed} = {gate.max_error_ratio:.0%} may fail), "
            f"{gate.undecided} not judged yet; Ready within {gate.timeout_seconds} s, "
            f"then {gate.bake_seconds} s bake"
        )
    if page.runtimes:
        lines.append(f"Runtimes of wave {rollout.wave_label()}:")
        lines += [
            "  " + line
            for line in _table(
                ["KYMA", "RUNTIME-ID", "STATE", "REASON"],
                [[t.kyma.name, t.kyma.runtime_id, t.state, t.reason or "-"] for t in page.runtimes],
            )
        ]
        if page.runtimes_more:
            lines.append(f"  ... {page.runtimes_more} more")
    lines.append("Timeline:")
    lines += [f"  {display(event.at)}  {event.kind:<13} {event.text}" for event in page.events]
    return lines


class Command(BaseCommand):
    help = "Follow and steer rollouts: status [NAME], pause|resume|abort|rollback NAME."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "action",
            choices=["status", *ACTIONS],
            help="status shows where rollouts stand; the others are the operator's actions on one",
        )
        parser.add_argument("name", nargs="?", help="the rollout (manage.py rollout status lists them)")

    def handle(self, *args: Any, **options: Any) -> None:
        action, name = options["action"], options["name"]
        if action == "status" and not name:
            self._list()
            return
        if not name:
            raise CommandError(
                f"rollout {action} needs the rollout's name (manage.py rollout status lists them)"
            )
        rollout = Rollout.objects.filter(name=name).first()
        if rollout is None:
            raise CommandError(f'rollout "{name}" not found')
        if action == "status":
            self.stdout.write("\n".join(status_lines(rollout)))
            return
        actor = audit.command_actor(f"manage.py rollout {action} {name}")
        try:
            with audit.acting(actor):
                rollout = ACTIONS[action](rollout=rollout)
        except ApplicationError as exc:
            audit.record_refusal(
                exc, action=action, kind="Rollout", name=rollout.name, uid=str(rollout.uid), actor=actor
            )
            raise CommandError(exc.message) from exc
        self.stdout.write(f"rollout {rollout.name}: {rollout.state} - {rollout.message}")

    def _list(self) -> None:
        rows = selectors.rollouts_under_way(limit=50)
        finished = [r for r in selectors.recent_rollouts(limit=10) if not r.is_active]
        if not rows and not finished:
            self.stdout.write("no rollouts")
            return
        table = [
            [
                row.rollout.name,
                row.rollout.kind,
                row.rollout.state,
                row.rollout.wave_label(),
                f"{row.changed}/{row.rollout.runtimes}",
                row.description,
            ]
            for row in rows
        ]
        table += [[r.name, r.kind, r.state, "-", f"-/{r.runtimes}", ""] for r in finished]
        self.stdout.write("\n".join(_table(["NAME", "KIND", "STATE", "WAVE", "CHANGED", "CHANGE"], table)))
