"""gunicorn configuration of the listener role (WatchEvents over mutual TLS).

Started by ``python manage.py serve listener``, which prepares the TLS material and sets
``LISTENER_*``. Threads keep each runtime watcher's connection alive between events. In proxy
mode (behind Istio/Envoy) TLS ends at the proxy and this serves plain HTTP.
"""

import os
import ssl
from collections.abc import Callable

bind = os.environ.get("LISTENER_BIND", "127.0.0.1:8443")
workers = int(os.environ.get("LISTENER_WORKERS", "2"))
worker_class = "controlplane.gunicorn.JsonErrorThreadWorker"  # gthread, errors in JSON
threads = int(os.environ.get("LISTENER_THREADS", "8"))
worker_connections = 4000
keepalive = 75
timeout = 30
graceful_timeout = 20
backlog = 4096
# X-Forwarded-Client-Cert carries a URL-encoded certificate (chain): allow up to 40 KiB so the
# listener itself can refuse anything over 32 KiB with a clear answer.
limit_request_field_size = 40960
#: `1` logs every request of the listener.
accesslog = "-" if os.environ.get("LISTENER_ACCESS_LOG", "0") == "1" else None
proc_name = "controlplane-listener"
control_socket_disable = True
forwarded_allow_ips = (
    ",".join(filter(None, os.environ.get("LISTENER_TRUSTED_PROXIES", "").split(","))) or "127.0.0.1"
)

if os.environ.get("LISTENER_MODE", "direct") == "direct":
    #: Direct mode: the listener's server certificate file gunicorn serves (and `/readyz` checks).
    #: Default: set by `serve listener` from the PKI
    certfile = os.environ["LISTENER_CERTFILE"]
    #: Direct mode: its private key file.
    #: Default: set by `serve listener` from the PKI
    keyfile = os.environ["LISTENER_KEYFILE"]
    #: Direct mode: the CA bundle client certificates must chain to.
    #: Default: set by `serve listener` from the PKI
    ca_certs = os.environ["LISTENER_CA_BUNDLE"]
    cert_reqs = ssl.CERT_REQUIRED

    def ssl_context(
        conf: object, default_ssl_context_factory: Callable[[], ssl.SSLContext]
    ) -> ssl.SSLContext:
        from listener.tls import TLS

        return TLS.context(default_ssl_context_factory)

    def _serve_tls() -> None:
        from django.conf import settings

        from listener.tls import TLS

        TLS.refresh()
        TLS.start(settings.LISTENER_TLS_REFRESH)

else:

    def _serve_tls() -> None:
        return


def post_worker_init(worker: object) -> None:
    _serve_tls()
    from fleet.queue import publisher_warm
    from listener.cache import REFRESHER

    publisher_warm()  # the first event does not wait for the broker connection (fleet/queue/warm.py)
    REFRESHER.start()  # the look-ups of runtimes in use stay fresh: their events query nothing
    from listener.readiness import worker_serving

    worker_serving(worker.pid)  # /readyz: this worker takes connections now


def when_ready(server: object) -> None:
    from listener.readiness import workers_reset

    workers_reset()  # before the first worker starts
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and os.environ.get("LISTENER_METRICS_BIND"):
        # The side port's /readyz reads the database and the broker: Django and the project's
        # Celery app must be set up in the master first.
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
        import django

        django.setup()
        import controlplane  # noqa: F401 - the project's Celery app becomes the current one
        from listener.metrics_server import start

        start(os.environ["LISTENER_METRICS_BIND"])


def child_exit(server: object, worker: object) -> None:
    from listener.readiness import worker_gone

    worker_gone(worker.pid)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
