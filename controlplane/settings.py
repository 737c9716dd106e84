"""Settings, read from the environment in this one place (12-factor).

Defaults need no setup: SQLite and Celery's filesystem broker under a local state directory,
and - in debug mode only - a secret key and an encryption key generated into that directory on
first use. With ``DJANGO_DEBUG`` off the process refuses to start without a real secret key and
encryption keys. Every variable read here is listed in the README's configuration table.
"""

from __future__ import annotations

import importlib.util
import json
import secrets
from collections.abc import Callable
from pathlib import Path

import environ
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from kernel.documents.dockerconfig import DockerConfigError, read_docker_config
from kernel.documents.maintenance import PolicyError, read_policy_file

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

DEBUG: bool = env.bool("DJANGO_DEBUG", default=True)
STATE_DIR = Path(env.str("CONTROLPLANE_STATE_DIR", default=str(BASE_DIR / ".state"))).resolve()
ROLE: str = env.str("CONTROLPLANE_ROLE", default="web")


def _state_secret(filename: str, make: Callable[[], str]) -> str:
    """Read a development secret from the state directory, creating it on first use."""
    path = STATE_DIR / filename
    if not path.exists():
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(make())
        path.chmod(0o600)
    return path.read_text().strip()


# --- Core Django -----------------------------------------------------------------------------

SECRET_KEY: str = env.str("DJANGO_SECRET_KEY", default="")
ENCRYPTION_KEYS: list[str] = env.list("CONTROLPLANE_ENCRYPTION_KEYS", default=[])
if DEBUG:
    SECRET_KEY = SECRET_KEY or _state_secret("secret-key", lambda: secrets.token_urlsafe(50))
    ENCRYPTION_KEYS = ENCRYPTION_KEYS or [
        _state_secret("encryption-key", lambda: Fernet.generate_key().decode())
    ]
else:
    if len(SECRET_KEY) < 50 or SECRET_KEY.startswith("django-insecure"):
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set to a random value of at least 50 characters "
            "when DJANGO_DEBUG is off"
        )
    if not ENCRYPTION_KEYS:
        raise ImproperlyConfigured(
            "CONTROLPLANE_ENCRYPTION_KEYS must list at least one Fernet key when DJANGO_DEBUG is off "
            '(generate one with: python -c "from cryptography.fernet import Fernet; '
            'print(Fernet.generate_key().decode())")'
        )
for _key in ENCRYPTION_KEYS:
    try:
        Fernet(_key)
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"CONTROLPLANE_ENCRYPTION_KEYS holds an invalid Fernet key: {exc}"
        ) from exc

ALLOWED_HOSTS: list[str] = env.list(
    "DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
if not DEBUG and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must be set when DJANGO_DEBUG is off")
CSRF_TRUSTED_ORIGINS: list[str] = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "kernel",
    "controlplane",
    "fleet",
    "watchers",
    "pki",
    "listener",
]
# The simulated runtimes of ``make run`` (development only): installed where their packages are,
# ahead of ``controlplane`` so that its ``demo`` command (which only says what to install) yields.
if all(importlib.util.find_spec(name) for name in ("demo", "runtime_emulator", "kmock")):
    INSTALLED_APPS.insert(INSTALLED_APPS.index("controlplane"), "demo")

MIDDLEWARE = [
    # First: a body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused (413, JSON) before anything reads it.
    "kernel.middleware.RequestBodyLimit",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Writes made while serving a request are recorded as its actor's (kernel.audit).
    "kernel.audit.AuditMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# The largest request body the web role takes: what a document may be (kernel.documents.yamlio's
# MAX_INPUT_BYTES), so every document that parses can be sent; larger ones are a 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{STATE_DIR / 'controlplane.sqlite3'}"),
}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, listener, worker, beat) share the file: wait for locks instead of
    # failing, and use WAL so readers never block the writer.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["TEST"] = {"NAME": str(STATE_DIR / "test-controlplane.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
# Dates Django renders itself use the admin's one time format (controlplane/formats/en/formats.py).
FORMAT_MODULE_PATH = ["controlplane.formats"]

STATIC_URL = "static/"
STATIC_ROOT = STATE_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG

# --- Security (production) -------------------------------------------------------------------

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT: bool = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS: int = env.int("DJANGO_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD: bool = env.bool("DJANGO_HSTS_PRELOAD", default=not DEBUG)
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
X_FRAME_OPTIONS = "DENY"

LOG_FORMAT: str = env.str("LOG_FORMAT", default="text")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be 'text' or 'json', not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "kernel.logfmt.JsonFormatter"},
    },
    "filters": {"beat_sends_at_debug": {"()": "kernel.logfmt.BeatSendsAtDebug"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["beat_sends_at_debug"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # "Task ... received" / "succeeded in 0.06s: None" for every task: our tasks log what
        # they did (one line per reconcile); failures are logged at ERROR and stay.
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
    },
}

# --- REST API --------------------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Module managers' credentials (kcpm_ keys) and named, expiring tokens (kcp_) first; DRF's
        # older keys keep working through the two after them.
        "fleet.api.authentication.ModuleCredentialAuthentication",
        "kernel.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.TokenAuthentication",
        "kernel.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["kernel.api.permissions.StaffModelPermissions"],
    "DEFAULT_PARSER_CLASSES": [
        "kernel.api.parsers.JSONParser",
        "kernel.api.parsers.YAMLParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "kernel.api.yaml.YAMLRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "kernel.api.pagination.Pagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "kernel.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Kyma fleet control plane API",
    "DESCRIPTION": "Kymas, Watchers, Modules, ModuleConfigs and SyncResources in the upstream CR shapes.",
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "OAS_VERSION": "3.1.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery ----------------------------------------------------------------------------------

CELERY_BROKER_URL: str = env.str("CELERY_BROKER_URL", default="filesystem://localhost/")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _queue_dir = STATE_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        (_queue_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir / "queue"),
        "data_folder_out": str(_queue_dir / "queue"),
        "processed_folder": str(_queue_dir / "processed"),
        "control_folder": str(_queue_dir / "control"),
        "store_processed": False,
        # The folder is polled; 0.1 s keeps event-to-reconcile latency low at negligible cost.
        "polling_interval": env.float("CELERY_FILESYSTEM_POLLING_INTERVAL", default=0.1),
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=600)
    }
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A reconcile spends most of its time waiting on runtime API servers in other regions (20-150 ms
# a round trip), so each worker process runs many at once in threads (bench/fleet.py measured the
# threads pool against prefork). Each thread keeps its own database connection: workers x
# WORKER_CONCURRENCY must stay well below PostgreSQL's max_connections.
CELERY_WORKER_POOL: str = env.str("WORKER_POOL", default="threads")
CELERY_WORKER_CONCURRENCY: int = env.int("WORKER_CONCURRENCY", default=16)
# Celery's Django fix-up reconnects around every task unless this is set; with it, a task reuses
# its thread's connection (controlplane/celery.py checks its age and health before each task).
CELERY_DB_REUSE_MAX = 1000
if CELERY_WORKER_POOL not in ("threads", "prefork", "solo"):
    raise ImproperlyConfigured("WORKER_POOL must be threads, prefork or solo")
if CELERY_WORKER_CONCURRENCY < 1:
    raise ImproperlyConfigured("WORKER_CONCURRENCY must be at least 1")
# With a broker that has no event loop (the filesystem one) ETA tasks wait on a timer thread that
# sleeps up to this long between checks; Celery's 1 s default would add up to a second to every
# event-triggered reconcile (they carry LISTENER_RECONCILE_DELAY as countdown).
CELERY_WORKER_TIMER_PRECISION: float = env.float("CELERY_WORKER_TIMER_PRECISION", default=0.05)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
# django-celery-beat's database scheduler, elected: any number of beats, one sends (controlplane/beat.py).
CELERY_BEAT_SCHEDULER = "controlplane.beat:ElectedScheduler"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_DEFAULT_QUEUE = "controlplane"
# Publishing must fail fast (the listener answers 503) instead of hanging on a dead broker.
CELERY_BROKER_CONNECTION_TIMEOUT: float = env.float("CELERY_BROKER_CONNECTION_TIMEOUT", default=2.0)
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2}
# A worker outlives broker outages (controlplane/worker.py): it reconnects for ever, at most this
# many seconds apart, and gives back what it held when the connection went (controlplane/broker.py).
CELERY_WORKER_CONSUMER = "controlplane.worker:Consumer"
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
WORKER_RECONNECT_MAX: float = env.float("WORKER_RECONNECT_MAX", default=2.0)
if WORKER_RECONNECT_MAX <= 0:
    raise ImproperlyConfigured("WORKER_RECONNECT_MAX must be positive")
# Running tasks go on when the connection is lost (their messages are queued again on reconnect;
# a reconcile is idempotent and leased): Celery 6 would cancel them by default.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False

# Beat's election: the leader renews its lease every third of BEAT_LEASE_SECONDS; a standby tries
# to take it every BEAT_STANDBY_POLL seconds, so a killed leader is replaced within their sum.
BEAT_LEASE_SECONDS: float = env.float("BEAT_LEASE_SECONDS", default=10.0)
BEAT_STANDBY_POLL: float = env.float("BEAT_STANDBY_POLL", default=1.0)
if not 0 < BEAT_STANDBY_POLL < BEAT_LEASE_SECONDS:
    raise ImproperlyConfigured("BEAT_STANDBY_POLL must be positive and below BEAT_LEASE_SECONDS")
# Side ports of the Celery roles (probes and metrics: controlplane/probes.py); empty: none.
BEAT_METRICS_BIND: str = env.str("BEAT_METRICS_BIND", default="")
WORKER_METRICS_BIND: str = env.str("WORKER_METRICS_BIND", default="")

# --- Control plane ---------------------------------------------------------------------------

WEB_BIND: str = env.str("WEB_BIND", default="127.0.0.1:8000")
WEB_WORKERS: int = env.int("WEB_WORKERS", default=2)
PUBLIC_URL: str = env.str("CONTROLPLANE_PUBLIC_URL", default=f"http://{WEB_BIND}")

# --- Reconcile scheduling ----------------------------------------------------------------------

# A queued-flag older than this is considered lost (its task vanished) and is claimed again.
RECONCILE_QUEUED_TTL: int = env.int("RECONCILE_QUEUED_TTL", default=120)
# A mark whose task was due this long ago and never started, while the broker's queue is empty,
# lost its task (the process that claimed it, or the worker that held it, died): beat's sweep
# queues the reconcile again (fleet/queue/requests.py).
RECONCILE_OVERDUE_AFTER: float = env.float("RECONCILE_OVERDUE_AFTER", default=30)
# How long one reconcile may hold a Kyma before another worker may take over.
RECONCILE_LEASE_SECONDS: int = env.int("RECONCILE_LEASE_SECONDS", default=60)

# --- PKI -------------------------------------------------------------------------------------

PKI_CA_KEY_TYPE: str = env.str("PKI_CA_KEY_TYPE", default="ecdsa-p256")
PKI_CA_VALIDITY_DAYS: int = env.int("PKI_CA_VALIDITY_DAYS", default=90)
PKI_CA_COMMON_NAME: str = env.str("PKI_CA_COMMON_NAME", default="Kyma fleet control plane CA")
PKI_CA_ORGANIZATION: str = env.str("PKI_CA_ORGANIZATION", default="")
PKI_CA_ORGANIZATIONAL_UNIT: str = env.str("PKI_CA_ORGANIZATIONAL_UNIT", default="")
PKI_CA_COUNTRY: str = env.str("PKI_CA_COUNTRY", default="")
PKI_CA_LOCALITY: str = env.str("PKI_CA_LOCALITY", default="")
# Rotate the issuing CA this long before it expires; runtimes then have the grace period to
# receive the new bundle before the listener presents a certificate from the new CA.
PKI_CA_ROTATE_BEFORE_DAYS: int = env.int("PKI_CA_ROTATE_BEFORE_DAYS", default=34)
PKI_CA_GRACE_DAYS: float = env.float("PKI_CA_GRACE_DAYS", default=4)
PKI_CERT_KEY_TYPE: str = env.str("PKI_CERT_KEY_TYPE", default="ecdsa-p256")
PKI_CERT_VALIDITY_DAYS: int = env.int("PKI_CERT_VALIDITY_DAYS", default=60)
PKI_CERT_RENEW_BEFORE_DAYS: int = env.int("PKI_CERT_RENEW_BEFORE_DAYS", default=30)
PKI_EXTRA_DNS_NAMES: list[str] = env.list("PKI_EXTRA_DNS_NAMES", default=[])
PKI_RENEW_BATCH: int = env.int("PKI_RENEW_BATCH", default=500)
PKI_MAINTAIN_INTERVAL: int = env.int("PKI_MAINTAIN_INTERVAL", default=300)
LISTENER_HOSTNAMES: list[str] = env.list("LISTENER_HOSTNAMES", default=["localhost", "127.0.0.1"])

_KEY_TYPES = ("ecdsa-p256", "rsa-2048", "rsa-3072", "rsa-4096")
for _name, _value in (("PKI_CA_KEY_TYPE", PKI_CA_KEY_TYPE), ("PKI_CERT_KEY_TYPE", PKI_CERT_KEY_TYPE)):
    if _value not in _KEY_TYPES:
        raise ImproperlyConfigured(f"{_name} must be one of {', '.join(_KEY_TYPES)}, got {_value!r}")
if not 0 < PKI_CERT_RENEW_BEFORE_DAYS < PKI_CERT_VALIDITY_DAYS:
    raise ImproperlyConfigured("PKI_CERT_RENEW_BEFORE_DAYS must be positive and below PKI_CERT_VALIDITY_DAYS")
if not 0 <= PKI_CA_GRACE_DAYS < PKI_CA_ROTATE_BEFORE_DAYS < PKI_CA_VALIDITY_DAYS:
    raise ImproperlyConfigured(
        "PKI_CA_GRACE_DAYS < PKI_CA_ROTATE_BEFORE_DAYS < PKI_CA_VALIDITY_DAYS must hold "
        "(the grace period runs inside the rotation window, which runs inside the CA's life)"
    )
if not LISTENER_HOSTNAMES:
    raise ImproperlyConfigured("LISTENER_HOSTNAMES must name at least one host for the listener certificate")

# --- Periodic work (installed into django-celery-beat's tables when beat starts) ---------------

# --- Audit trail (kernel.audit): who did what, through which door -------------------------------

AUDIT_KEPT_DAYS: float = env.float("AUDIT_KEPT_DAYS", default=90)
if AUDIT_KEPT_DAYS <= 0:
    raise ImproperlyConfigured("AUDIT_KEPT_DAYS must be a positive number of days")

CELERY_BEAT_SCHEDULE = {
    "audit-prune": {"task": "kernel.audit_prune", "schedule": 3600.0, "options": {"expires": 3600.0}},
    "housekeeping": {"task": "controlplane.housekeeping", "schedule": 300.0, "options": {"expires": 300.0}},
    "listener-housekeeping": {
        "task": "listener.housekeeping",
        "schedule": 300.0,
        "options": {"expires": 300.0},
    },
    "pki-maintain": {
        "task": "pki.maintain",
        "schedule": float(PKI_MAINTAIN_INTERVAL),
        # A run that waited longer than its interval is dropped: the next one does the same work.
        "options": {"expires": float(PKI_MAINTAIN_INTERVAL)},
    },
}

# --- Listener (WatchEvents from runtime watchers) -----------------------------------------------

LISTENER_BIND: str = env.str("LISTENER_BIND", default="127.0.0.1:8443")
LISTENER_MODE: str = env.str("LISTENER_MODE", default="direct")
if LISTENER_MODE not in ("direct", "proxy"):
    raise ImproperlyConfigured(f"LISTENER_MODE must be 'direct' or 'proxy', got {LISTENER_MODE!r}")
LISTENER_TRUSTED_PROXIES: list[str] = env.list("LISTENER_TRUSTED_PROXIES", default=[])
LISTENER_SAN_PINNING: bool = env.bool("LISTENER_SAN_PINNING", default=True)
LISTENER_WORKERS: int = env.int("LISTENER_WORKERS", default=2)
LISTENER_THREADS: int = env.int("LISTENER_THREADS", default=8)
LISTENER_METRICS_BIND: str = env.str("LISTENER_METRICS_BIND", default="127.0.0.1:9102")
# The component whose events reconcile the Kyma itself (upstream: lifecycle-manager).
LISTENER_RECONCILE_COMPONENT: str = env.str("LISTENER_RECONCILE_COMPONENT", default="lifecycle-manager")
# A validating webhook fires before the API server stores the change: wait this long before the
# reconcile an event triggers, so it reads the change (and bursts coalesce meanwhile).
LISTENER_RECONCILE_DELAY: float = env.float("LISTENER_RECONCILE_DELAY", default=0.1)
# How far other hosts' clocks may run ahead of a listener's (used to skip redundant queue checks).
LISTENER_CLOCK_SKEW: float = env.float("LISTENER_CLOCK_SKEW", default=0.025)
# The least time between an event and the moment its reconcile reads the runtime (the API server
# stores the change after the webhook answered); events just before a queued reconcile is due
# make it wait that long.
LISTENER_EVENT_MARGIN: float = env.float("LISTENER_EVENT_MARGIN", default=0.05)
if LISTENER_EVENT_MARGIN < 0 or (
    LISTENER_EVENT_MARGIN > 0 and LISTENER_EVENT_MARGIN + LISTENER_CLOCK_SKEW > LISTENER_RECONCILE_DELAY
):
    raise ImproperlyConfigured(
        f"LISTENER_EVENT_MARGIN ({LISTENER_EVENT_MARGIN}) plus LISTENER_CLOCK_SKEW ({LISTENER_CLOCK_SKEW}) "
        f"must not exceed LISTENER_RECONCILE_DELAY ({LISTENER_RECONCILE_DELAY}): the reconcile an event "
        "queues waits that delay (set LISTENER_EVENT_MARGIN=0 to turn the margin off)"
    )
LISTENER_EVENTS_KEPT: int = env.int("LISTENER_EVENTS_KEPT", default=100)
# Seconds a 503 (queue or database away) asks the runtime watcher to wait before it retries.
LISTENER_RETRY_AFTER: int = env.int("LISTENER_RETRY_AFTER", default=2)
if LISTENER_RETRY_AFTER < 0:
    raise ImproperlyConfigured("LISTENER_RETRY_AFTER must be 0 or more seconds")
LISTENER_CACHE_SECONDS: float = env.float("LISTENER_CACHE_SECONDS", default=2.0)
LISTENER_TLS_REFRESH: float = env.float("LISTENER_TLS_REFRESH", default=30.0)
LISTENER_FORWARD_URL: str = env.str(
    "LISTENER_FORWARD_URL", default="http://{name}.{namespace}.svc.cluster.local:{port}"
)
LISTENER_FORWARD_TIMEOUT: float = env.float("LISTENER_FORWARD_TIMEOUT", default=5.0)
# The listener's Service inside the control-plane cluster (the Istio VirtualServices route to it).
LISTENER_SERVICE_NAME: str = env.str("LISTENER_SERVICE_NAME", default="controlplane-listener")
LISTENER_SERVICE_NAMESPACE: str = env.str("LISTENER_SERVICE_NAMESPACE", default="kcp-system")

if ROLE == "listener":
    # A health-check query before every request would double the listener's database round trips;
    # a broken connection instead fails one request with 503 (the watcher retries) and is replaced.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
RECONCILE_RECORDS_KEPT: int = env.int("RECONCILE_RECORDS_KEPT", default=50)
# Where "a reconcile is queued" marks live: Redis (cheap for every WatchEvent) when the broker is
# Redis, else the database. Set a redis:// URL to use another Redis, or "database".
_flags_url = env.str("RECONCILE_FLAGS_URL", default="auto")
RECONCILE_FLAGS_URL: str = (
    (CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else "")
    if _flags_url == "auto"
    else ("" if _flags_url == "database" else _flags_url)
)
RECONCILE_FLAGS_PREFIX: str = env.str("RECONCILE_FLAGS_PREFIX", default="controlplane")

# --- Runtime watcher (what the control plane deploys into each runtime) ----------------------------

WATCHER_IMAGE: str = env.str("WATCHER_IMAGE", default="ghcr.io/kyma-fleet/runtime-watcher:0.1.0")
# The listener address as runtimes reach it (host:port); its host must be in LISTENER_HOSTNAMES.
WATCHER_KCP_ADDR: str = env.str("WATCHER_KCP_ADDR", default=f"localhost:{LISTENER_BIND.rpartition(':')[2]}")
WATCHER_HEARTBEAT_INTERVAL: int = env.int("WATCHER_HEARTBEAT_INTERVAL", default=30)
WATCHER_CPU_LIMIT: str = env.str("WATCHER_CPU_LIMIT", default="100m")
WATCHER_MEMORY_LIMIT: str = env.str("WATCHER_MEMORY_LIMIT", default="128Mi")
# A docker config JSON (.dockerconfigjson) for a private registry: becomes the watcher's image pull
# Secret in every runtime. Read again at every render, so a rotated file needs no restart.
WATCHER_IMAGE_PULL_SECRET_FILE: str = env.str("WATCHER_IMAGE_PULL_SECRET_FILE", default="")
if WATCHER_IMAGE_PULL_SECRET_FILE:
    try:
        read_docker_config(WATCHER_IMAGE_PULL_SECRET_FILE)
    except DockerConfigError as _exc:
        raise ImproperlyConfigured(f"WATCHER_IMAGE_PULL_SECRET_FILE: {_exc}") from None
# A runtime watcher without a heartbeat for this long is "silent" (0 turns the detection off).
WATCHER_SILENT_AFTER: int = env.int("WATCHER_SILENT_AFTER", default=120)
# How often beat looks for Ready Kymas whose watcher fell silent (they are reconciled at once).
WATCHER_SILENT_CHECK_INTERVAL: float = env.float("WATCHER_SILENT_CHECK_INTERVAL", default=30)
if WATCHER_SILENT_AFTER < 0:
    raise ImproperlyConfigured("WATCHER_SILENT_AFTER must be 0 (off) or a number of seconds")

# --- Maintenance windows and rollouts ------------------------------------------------------------

# Upstream's maintenance-window policy as a JSON file (used while the admin has saved none).
MAINTENANCE_POLICY_FILE: str = env.str("MAINTENANCE_POLICY_FILE", default="")
if MAINTENANCE_POLICY_FILE:
    try:
        read_policy_file(MAINTENANCE_POLICY_FILE)
    except PolicyError as _exc:
        raise ImproperlyConfigured(f"MAINTENANCE_POLICY_FILE: {_exc}") from None
# A window counts as open only while at least this much of it is left (upstream: 20 minutes).
MAINTENANCE_WINDOW_MIN_SIZE: float = env.float("MAINTENANCE_WINDOW_MIN_SIZE", default=1200)
if MAINTENANCE_WINDOW_MIN_SIZE < 0:
    raise ImproperlyConfigured("MAINTENANCE_WINDOW_MIN_SIZE must be a number of seconds (0 or more)")
# Waves and gates per kind of change ({"ModuleVersion": {"waves": [...], "gate": {...}}, ...}), over
# the defaults (1 canary, 5 %, 25 %, 100 %; checked by the fleet app when it starts).
try:
    ROLLOUT_POLICY: dict = json.loads(env.str("ROLLOUT_POLICY", default="") or "{}")
except ValueError as _exc:
    raise ImproperlyConfigured(f"ROLLOUT_POLICY is not JSON: {_exc}") from None
if not isinstance(ROLLOUT_POLICY, dict):
    raise ImproperlyConfigured("ROLLOUT_POLICY must be a JSON object of policies by kind of change")
# How often beat moves rollouts on (judges the current wave, starts the next).
ROLLOUT_ADVANCE_INTERVAL: float = env.float("ROLLOUT_ADVANCE_INTERVAL", default=2.0)

# --- Reconciles of runtimes ----------------------------------------------------------------------

RUNTIME_CONNECT_TIMEOUT: float = env.float("RUNTIME_CONNECT_TIMEOUT", default=3.0)
RUNTIME_READ_TIMEOUT: float = env.float("RUNTIME_READ_TIMEOUT", default=15.0)
RUNTIME_FIELD_MANAGER: str = env.str("RUNTIME_FIELD_MANAGER", default="kyma-control-plane")
RUNTIME_CLIENT_CACHE: int = env.int("RUNTIME_CLIENT_CACHE", default=1000)
# Objects whose drift breaks little at once (CRDs, PriorityClass, NetworkPolicies, Services) are
# re-read this often; the watcher's Secret, Deployment and webhooks, and synced manifests, every time.
RUNTIME_RECHECK_INTERVAL: float = env.float("RUNTIME_RECHECK_INTERVAL", default=1800)
# Requeue intervals by state (seconds); Error backs off from the first to the second value.
RECONCILE_READY_INTERVAL: float = env.float("RECONCILE_READY_INTERVAL", default=300)
RECONCILE_PROCESSING_INTERVAL: float = env.float("RECONCILE_PROCESSING_INTERVAL", default=5)
RECONCILE_WARNING_INTERVAL: float = env.float("RECONCILE_WARNING_INTERVAL", default=30)
RECONCILE_ERROR_BACKOFF: list[float] = [
    float(v) for v in env.list("RECONCILE_ERROR_BACKOFF", default=["5", "30"])
]
# A Kyma is reconciled at most once per this many seconds: a runtime that keeps changing cannot
# crowd the rest of the fleet out of the workers (its events coalesce into the deferred reconcile).
RECONCILE_MIN_SPACING: float = env.float("RECONCILE_MIN_SPACING", default=1.0)
# Of each worker process's slots, how many reconciles of runtimes that keep changing (their events
# came while the spacing held them back) may hold at once; the rest stay for the other runtimes.
# bench/module_chain.py (b), quiet runtimes' edits under 100 edits/s on 50 busy ones, with targeted
# reconciles: with 2 of 16 slots p99 0.9-1.6 s in four runs (p50 0.37-0.58 s), with 4 p99 1.96 and
# 1.98 s (p50 0.80-0.86 s), at about the same reconciles/s (see the README's benchmark table).
RECONCILE_BUSY_SLOTS: int = env.int("RECONCILE_BUSY_SLOTS", default=max(1, CELERY_WORKER_CONCURRENCY // 8))
if RECONCILE_BUSY_SLOTS < 1:
    raise ImproperlyConfigured("RECONCILE_BUSY_SLOTS must be at least 1")
# Longest a reconcile waits for the runtime to store the changes its events reported (our watcher
# says which change it saw): a change another webhook rejected is never stored and ends the wait
# here. Checked with reads every few milliseconds, so a stored change costs no fixed delay.
RECONCILE_STORED_WAIT: float = env.float("RECONCILE_STORED_WAIT", default=1.0)
RECONCILE_SWEEP_INTERVAL: float = env.float("RECONCILE_SWEEP_INTERVAL", default=2)
RECONCILE_SWEEP_LIMIT: int = env.int("RECONCILE_SWEEP_LIMIT", default=5000)
MODULE_NOTIFY_TIMEOUT: float = env.float("MODULE_NOTIFY_TIMEOUT", default=5)

# --- Watches of ModuleConfigs (GET /api/v1/moduleconfigs/?watch=true) -------------------------------

# Threads each web process keeps for watches, on top of WEB_THREADS for every other request: a
# watch holds its thread while it streams, so watches can never take the admin's or API's threads.
WEB_WATCH_THREADS: int = env.int("WEB_WATCH_THREADS", default=32)
MODULECONFIG_WATCH_PER_CREDENTIAL: int = env.int("MODULECONFIG_WATCH_PER_CREDENTIAL", default=10)
MODULECONFIG_WATCH_BOOKMARK_INTERVAL: float = env.float("MODULECONFIG_WATCH_BOOKMARK_INTERVAL", default=10)
MODULECONFIG_WATCH_TIMEOUT: float = env.float("MODULECONFIG_WATCH_TIMEOUT", default=1800)
# How often a web process looks for new revisions without being told (SQLite has no notifications;
# with PostgreSQL LISTEN or Redis pub/sub this only covers a lost announcement).
MODULECONFIG_WATCH_POLL_INTERVAL: float = env.float(
    "MODULECONFIG_WATCH_POLL_INTERVAL",
    default=0.1 if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3" else 5,
)
MODULECONFIG_WATCH_SLOT_TTL: float = env.float("MODULECONFIG_WATCH_SLOT_TTL", default=60)
# Deleted ModuleConfigs are remembered this long for resumed watches (older: 410, start over).
MODULECONFIG_DELETIONS_KEPT_DAYS: int = env.int("MODULECONFIG_DELETIONS_KEPT_DAYS", default=7)
# Redis for revision announcements when the database is not PostgreSQL (auto: the flags' Redis).
_watch_redis = env.str("MODULECONFIG_WATCH_REDIS_URL", default="auto")
MODULECONFIG_WATCH_REDIS_URL: str = RECONCILE_FLAGS_URL if _watch_redis == "auto" else _watch_redis
if WEB_WATCH_THREADS < 1 or MODULECONFIG_WATCH_PER_CREDENTIAL < 1:
    raise ImproperlyConfigured("WEB_WATCH_THREADS and MODULECONFIG_WATCH_PER_CREDENTIAL must be at least 1")
if (
    MODULECONFIG_WATCH_BOOKMARK_INTERVAL <= 0
    or MODULECONFIG_WATCH_BOOKMARK_INTERVAL * 2 > MODULECONFIG_WATCH_SLOT_TTL
):
    raise ImproperlyConfigured(
        "MODULECONFIG_WATCH_BOOKMARK_INTERVAL must be positive and at most half of "
        "MODULECONFIG_WATCH_SLOT_TTL"
    )
if len(RECONCILE_ERROR_BACKOFF) != 2 or not 0 < RECONCILE_ERROR_BACKOFF[0] <= RECONCILE_ERROR_BACKOFF[1]:
    raise ImproperlyConfigured("RECONCILE_ERROR_BACKOFF must be two numbers FIRST,MAX with 0 < FIRST <= MAX")

CELERY_BEAT_SCHEDULE["reconcile-due"] = {
    "task": "controlplane.reconcile_due",
    "schedule": RECONCILE_SWEEP_INTERVAL,
    "options": {"expires": RECONCILE_SWEEP_INTERVAL},
}
CELERY_BEAT_SCHEDULE["watchers-silent"] = {
    "task": "controlplane.watcher_silence_check",
    "schedule": WATCHER_SILENT_CHECK_INTERVAL,
    "options": {"expires": WATCHER_SILENT_CHECK_INTERVAL},
}
CELERY_BEAT_SCHEDULE["watchers-finalize"] = {
    "task": "watchers.finalize",
    "schedule": 30.0,
    "options": {"expires": 30.0},
}
CELERY_BEAT_SCHEDULE["rollouts-advance"] = {
    "task": "controlplane.rollouts_advance",
    "schedule": ROLLOUT_ADVANCE_INTERVAL,
    "options": {"expires": ROLLOUT_ADVANCE_INTERVAL},
}
CELERY_BEAT_SCHEDULE["watchers-status"] = {
    "task": "watchers.status_refresh",
    "schedule": 30.0,
    "options": {"expires": 30.0},
}
