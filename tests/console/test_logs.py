"""Logs an operator can read: one line per reconcile, quiet sweeps and task traces, JSON on
request, no favicon 404, and the generated admin password kept where it cannot scroll away."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import textwrap

import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from controlplane.management.commands.up import Supervisor, remind_when_serving
from fleet import queue, tasks
from kernel.adminpassword import admin_password_path, admin_password_reminder
from kernel.logfmt import JsonFormatter
from reconciler.run import kyma_reconcile_run
from tests.factories import KymaFactory, beside

# A process configured by the project's settings, logging what the worker and beat would log.
EMIT = textwrap.dedent(
    """
    import logging, django
    django.setup()
    logging.getLogger("celery.app.trace").info("Task controlplane.kyma_reconcile[x] succeeded in 0.06s: None")
    logging.getLogger("celery.worker.strategy").info("Task controlplane.kyma_reconcile[x] received")
    logging.getLogger("celery.app.trace").error("Task controlplane.kyma_reconcile[y] raised unexpected: boom")
    logging.getLogger("celery.beat").info("Scheduler: Sending due task reconcile-due (x.reconcile_due)")
    logging.getLogger("reconciler.run").info("reconciled kcp-system/demo-1: Ready in 5 ms")
    """
)


def _emit(tmp_path, **env: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", EMIT],
        cwd=settings.BASE_DIR,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "CONTROLPLANE_STATE_DIR": str(tmp_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stderr.splitlines()


def test_given_the_settings_when_tasks_succeed_then_no_trace_lines_but_failures_stay(tmp_path):
    lines = "\n".join(_emit(tmp_path, LOG_LEVEL="INFO", LOG_FORMAT="text"))
    assert "succeeded in" not in lines and "received" not in lines
    assert "raised unexpected: boom" in lines
    assert "reconciled kcp-system/demo-1: Ready" in lines


def test_given_info_level_then_beat_sends_are_hidden_and_shown_at_debug(tmp_path):
    assert not any("Sending due task" in line for line in _emit(tmp_path, LOG_LEVEL="INFO"))
    debug = [line for line in _emit(tmp_path, LOG_LEVEL="DEBUG") if "Sending due task" in line]
    assert len(debug) == 1 and " DEBUG celery.beat " in debug[0]


def test_given_log_format_json_then_every_line_is_one_json_object(tmp_path):
    lines = _emit(tmp_path, LOG_LEVEL="INFO", LOG_FORMAT="json")
    records = [json.loads(line) for line in lines]
    assert {"time", "level", "logger", "message"} <= set(records[0])
    assert ("ERROR", "celery.app.trace") in {(r["level"], r["logger"]) for r in records}


def test_given_an_unknown_log_format_then_start_up_names_the_choices(tmp_path):
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _emit(tmp_path, LOG_FORMAT="xml")
    assert "LOG_FORMAT must be 'text' or 'json'" in failed.value.stderr


def test_given_an_exception_when_formatted_as_json_then_the_traceback_is_one_field():
    try:
        raise ValueError("bad")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %s", ("it",), sys.exc_info())
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "failed it" and "ValueError: bad" in entry["exc_info"]


@pytest.mark.django_db(transaction=True)
def test_given_a_reconcile_when_it_ran_then_one_info_line_names_kyma_outcome_duration_reason(caplog):
    kyma = KymaFactory(name="logged", kubeconfig="")
    with caplog.at_level(logging.INFO, logger="reconciler.run"):
        kyma_reconcile_run(kyma.pk, reason="watch-event")
    lines = [r.getMessage() for r in caplog.records if r.name == "reconciler.run"]
    assert len(lines) == 1
    assert lines[0].startswith("reconciled kcp-system/logged: Error in ")
    assert " ms (requested: watch-event;" in lines[0] and "no kubeconfig" in lines[0]


@pytest.mark.django_db(transaction=True)
def test_given_a_request_then_the_task_carries_its_reason(task_queue):
    kyma = KymaFactory()
    queue.request([kyma.pk], reason="api")
    assert [(t.args, t.kwargs) for t in task_queue()] == [([kyma.pk], {"reason": "api"})]


@pytest.mark.django_db(transaction=True)
def test_given_nothing_due_when_beat_sweeps_then_debug_only_and_info_when_it_queues(caplog, task_queue):
    kyma = KymaFactory(next_reconcile_at=timezone.now() + timezone.timedelta(hours=1))
    with caplog.at_level(logging.DEBUG, logger="fleet.tasks"):
        tasks.reconcile_due()
    assert [r.levelno for r in caplog.records if r.name == "fleet.tasks"] == [logging.DEBUG]
    caplog.clear()
    beside(kyma.pk, next_reconcile_at=timezone.now())
    with caplog.at_level(logging.DEBUG, logger="fleet.tasks"):
        tasks.reconcile_due()
    infos = [r.getMessage() for r in caplog.records if r.name == "fleet.tasks" and r.levelno == logging.INFO]
    assert infos == ["periodic sweep: 1 reconcile(s) queued"]


def test_given_a_browser_when_it_asks_for_the_favicon_then_no_404(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 204


@pytest.mark.django_db
def test_given_no_admin_when_ensureadmin_then_the_password_is_boxed_and_kept_0600(
    settings, tmp_path, monkeypatch
):
    monkeypatch.delenv("DJANGO_SUPERUSER_PASSWORD", raising=False)
    settings.STATE_DIR = tmp_path
    settings.DEBUG = True  # make run's generated password
    out = io.StringIO()
    call_command("ensureadmin", stdout=out)
    path = admin_password_path()
    password = path.read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = out.getvalue()
    assert f"password: {password}" in text and str(path) in text
    assert text.lstrip().startswith("+---") or "\n+---" in text
    reminder = admin_password_reminder()
    assert reminder is not None and str(path) in reminder


@pytest.mark.django_db
def test_given_a_password_from_the_environment_then_nothing_is_written(settings, tmp_path, monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "from-env-123456")
    settings.STATE_DIR = tmp_path
    out = io.StringIO()
    call_command("ensureadmin", stdout=out)
    assert not admin_password_path().exists() and admin_password_reminder() is None
    assert "from-env-123456" not in out.getvalue()


def test_given_up_started_when_web_serves_then_the_reminder_is_printed(settings):
    with socket.create_server(("127.0.0.1", 0)) as web:
        settings.WEB_BIND = f"127.0.0.1:{web.getsockname()[1]}"
        out = io.StringIO()
        remind_when_serving(Supervisor([("web", ["true"])], out), "see /state/admin-password")
    assert out.getvalue() == "see /state/admin-password\n"
