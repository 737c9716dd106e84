"""Runtime watcher: the admission webhook that tells the control plane a runtime changed.

Runs inside every runtime cluster (``python -m watchers.runtime``). The Kubernetes API server
calls ``POST /validate/<component>`` for watched resources; the watcher always allows the request
and, when the change matters (same rules as Kyma's Go runtime-watcher), queues a WatchEvent that a
sender thread delivers over mutual TLS to ``https://<KCP_ADDR>/<KCP_CONTRACT>/<component>/event``.
It imports only the standard library and ``prometheus_client`` so the image stays small.

Differences from upstream, and why:

* The admission answer never waits on the control plane (bounded in-memory queue). The message
  ``kcp request succeeded`` therefore means *accepted for delivery*; delivery is retried with
  exponential backoff until it succeeds. ``kcp request failed: ...`` means the queue was full and
  the event was dropped.
* One pooled keep-alive mTLS connection instead of a TCP+TLS handshake per event.
* Identical pending events are coalesced; certificate files are re-read when they change;
  heartbeats report liveness; malformed requests and bad settings fail loudly.

Environment (required: ``CA_CERT``, ``TLS_CERT``, ``TLS_KEY``, ``KCP_ADDR``):

=====================  ===========  =====================================================================
Variable               Default      Meaning
=====================  ===========  =====================================================================
CA_CERT                (required)   PEM bundle of CAs the listener certificate must chain to; may hold
                                    several (old and new CA during a rotation)
TLS_CERT, TLS_KEY      (required)   PEM certificate and unencrypted key: webhook server certificate and
                                    client certificate towards the listener
KCP_ADDR               (required)   ``host:port`` of the listener; host is also the TLS server name
KCP_CONTRACT           v2           URL contract version, ``v1`` or ``v2``
WEBHOOK_PORT           8443         HTTPS admission port (1..65535)
METRICS_PORT           2112         plain HTTP ``/metrics`` and ``/healthz`` port (1..65535)
BIND_ADDRESS           0.0.0.0      address both servers listen on
HEARTBEAT_INTERVAL     30           seconds between heartbeats to ``/watcher/heartbeat``; 0 disables
SEND_QUEUE_SIZE        1000         max pending events; beyond it new events are dropped
BACKOFF_INITIAL        0.1          first retry delay in seconds (doubles per consecutive failure)
BACKOFF_MAX            30           retry delay cap in seconds
KCP_TIMEOUT            10           connect/read timeout per request to the listener, seconds
KCP_KEEP_ALIVE         true         reuse one connection; ``false`` = new handshake per request (upstream)
CERT_RELOAD_INTERVAL   5            how often (seconds, at most) certificate files are checked for changes
SHUTDOWN_TIMEOUT       10           how long SIGTERM waits for the queue to flush, seconds
MAX_REQUEST_BYTES      16777216     largest accepted AdmissionReview body
IDLE_TIMEOUT           120          idle keep-alive connections from the API server are closed after it
WATCHER_VERSION        (package)    version reported in heartbeats and logs
LOG_LEVEL              INFO         DEBUG, INFO, WARNING or ERROR (JSON lines on stderr)
=====================  ===========  =====================================================================
"""

from watchers.runtime.app import WatcherServer
from watchers.runtime.config import Config, ConfigError
from watchers.runtime.metrics import WatcherMetrics
from watchers.runtime.review import (
    KCP_FAILED,
    KCP_SUCCEEDED,
    AdmissionRequest,
    Decision,
    GroupVersionKind,
    ReviewError,
    WatchEvent,
    admission_response,
    detect_change,
    parse_admission_review,
)
from watchers.runtime.sender import backoff_delay
from watchers.runtime.version import VERSION

__all__ = [
    "KCP_FAILED",
    "KCP_SUCCEEDED",
    "VERSION",
    "AdmissionRequest",
    "Config",
    "ConfigError",
    "Decision",
    "GroupVersionKind",
    "ReviewError",
    "WatchEvent",
    "WatcherMetrics",
    "WatcherServer",
    "admission_response",
    "backoff_delay",
    "detect_change",
    "parse_admission_review",
]
