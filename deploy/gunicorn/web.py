"""gunicorn configuration of the web role (admin, REST API, health, metrics).

Started by ``python manage.py serve web``, which sets the bind address and the Prometheus
multi-process directory. Threads keep connections alive and let slow clients not block workers.

A ModuleConfig watch (``?watch=true``) streams for as long as its manager stays connected and holds
one thread meanwhile, so each process has ``WEB_WATCH_THREADS`` threads more than ``WEB_THREADS``;
the watch view admits at most ``WEB_WATCH_THREADS`` watches per process (then 503), so the
``WEB_THREADS`` threads always remain for the admin and the API. A waiting watch costs an idle
thread and a socket, no database connection (docs/modules/watching.md, "How watches are served").
"""

import os

bind = os.environ.get("WEB_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_WORKERS", "2"))
worker_class = "controlplane.gunicorn.JsonErrorThreadWorker"  # gthread, errors in JSON
#: gunicorn threads per web process for everything but ModuleConfig watches (see `WEB_WATCH_THREADS`).
request_threads = int(os.environ.get("WEB_THREADS", "4"))
threads = request_threads + int(os.environ.get("WEB_WATCH_THREADS", "32"))
keepalive = 5
timeout = 60
graceful_timeout = 20
max_requests = 5000
max_requests_jitter = 500
#: `0` turns the web access log off.
accesslog = "-" if os.environ.get("WEB_ACCESS_LOG", "1") == "1" else None
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
#: Proxies whose `X-Forwarded-*` headers gunicorn trusts.
forwarded_allow_ips = os.environ.get("WEB_FORWARDED_ALLOW_IPS", "127.0.0.1")
proc_name = "controlplane-web"
# Several gunicorn instances share a host (web, listener): no shared control socket in $HOME.
control_socket_disable = True


def post_worker_init(worker: object) -> None:
    """On SIGTERM, end the worker's ModuleConfig watches first: an open watch would otherwise
    hold the graceful shutdown for ``graceful_timeout`` (its manager resumes from its revision)."""
    import signal

    from console.api.watch import HUB

    def stop(sig: int, frame: object) -> None:
        HUB.shutdown()
        worker.handle_exit(sig, frame)

    signal.signal(signal.SIGTERM, stop)


def child_exit(server: object, worker: object) -> None:
    """Drop the metrics files of a worker that ended, so its gauges do not linger."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
