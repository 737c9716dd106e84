"""Settings, read from the environment in this one place (12-factor).

Defaults need no setup: SQLite and Celery's filesystem broker under a local state directory,
and - in debug mode only - a secret key and an encryption key generated into that directory on
first use. With ``DJANGO_DEBUG`` off the process refuses to start without a real secret key and
encryption keys. The ``#:`` comment above each read is that variable's meaning in the settings
reference the documentation build generates (``tools/docs/environment.py``; a test fails when a
variable has none).
"""

from __future__ import annotations

import importlib.util
import ipaddress
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

#: Development mode. Set `0` in production: then `DJANGO_SECRET_KEY`, `CONTROLPLANE_ENCRYPTION_KEYS` and
#: `DJANGO_ALLOWED_HOSTS` are required and the process refuses to start without them.
DEBUG: bool = env.bool("DJANGO_DEBUG", default=True)
#: SQLite database, filesystem broker, development keys, metrics files.
#: Default: `./.state` (in the repository)
STATE_DIR = Path(env.str("CONTROLPLANE_STATE_DIR", default=str(BASE_DIR / ".state"))).resolve()
#: `web` or `listener`: tunes database settings for the role. Set by `serve` (and by the listener's WSGI
#: module).
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

#: Django's secret key (at least 50 random characters).
#: Default: generated into the state dir (debug only)
SECRET_KEY: str = env.str("DJANGO_SECRET_KEY", default="")
#: Comma-separated Fernet keys; the first encrypts private keys and kubeconfigs, all decrypt. Rotate by
#: prepending a new key, running `python manage.py reencrypt`, then dropping the old one.
#: Default: generated into the state dir (debug only)
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

#: Host names the web role answers to.
#: Default: `localhost,127.0.0.1,[::1]` in debug mode; none in production (required)
ALLOWED_HOSTS: list[str] = env.list(
    "DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
if not DEBUG and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must be set when DJANGO_DEBUG is off")
#: Origins allowed to post forms (behind an ingress).
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
    "axes",
    "kernel",
    "controlplane",
    "fleet",
    "watchers",
    "pki",
    "reconciler",
    "listener",
    "console",
    "access",
]
# The simulated runtimes of ``make run`` (development only): installed where their packages are,
# ahead of ``controlplane`` so that its ``demo`` command (which only says what to install) yields.
if all(importlib.util.find_spec(name) for name in ("demo", "runtime_emulator", "kmock")):
    INSTALLED_APPS.insert(INSTALLED_APPS.index("controlplane"), "demo")

MIDDLEWARE = [
    # First: a body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused (413, JSON) before anything reads it.
    "kernel.middleware.RequestBodyLimit",
    # Then: a bad Host header or form body is a short 400 naming it (JSON for the API), never
    # Django's HTML page (with DEBUG, its traceback page).
    "kernel.middleware.BadRequestRefusal",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A session idle for SESSION_IDLE_SECONDS, or older than SESSION_MAX_SECONDS, ends here.
    "access.sessions.SessionLimits",
    # Writes made while serving a request are recorded as its actor's (kernel.audit).
    "kernel.audit.AuditMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: a locked-out login is answered here (429).
    "axes.middleware.AxesMiddleware",
]

# The largest request body the web role takes: what a document may be (kernel.documents.yamlio's
# MAX_INPUT_BYTES), so every document that parses can be sent; larger ones are a 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024
# With DEBUG, a request Django refuses (400) gets its one-line reason, not the traceback page.
DEFAULT_EXCEPTION_REPORTER = "kernel.badrequests.QuietExceptionReporter"

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
                "access.context.login_options",
            ],
        },
    },
]

#: The database, e.g. `postgres://user:pass@host:5432/db`.
#: Default: `sqlite:///<state dir>/controlplane.sqlite3`
DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{STATE_DIR / 'controlplane.sqlite3'}"),
}
#: Seconds a database connection is reused.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
#: PostgreSQL connections this process may hold at most, in Django's psycopg pool: a thread borrows one for a
#: request or a task and gives it back afterwards (the listener after each event), so threads share them.
#: `0`: no pool, each thread keeps a connection of its own for `DATABASE_CONN_MAX_AGE` seconds. See the
#: sizing table in the database page; ignored on SQLite.
DATABASE_POOL_MAX_SIZE: int = env.int("DATABASE_POOL_MAX_SIZE", default=0)
#: Seconds a thread waits for a pooled connection; then its request or task fails as "database unavailable"
#: (the listener answers 503 and the watcher retries; a task is retried).
DATABASE_POOL_TIMEOUT: float = env.float("DATABASE_POOL_TIMEOUT", default=10)
DATABASE_POOLED = DATABASE_POOL_MAX_SIZE > 0 and DATABASES["default"]["ENGINE"].endswith("postgresql")
if DATABASE_POOL_MAX_SIZE < 0 or DATABASE_POOL_TIMEOUT <= 0:
    raise ImproperlyConfigured("DATABASE_POOL_MAX_SIZE must be 0 or more, DATABASE_POOL_TIMEOUT positive")
if DATABASE_POOLED:
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DATABASE_POOL_MAX_SIZE,
        "timeout": DATABASE_POOL_TIMEOUT,
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # a pooled connection goes back to the pool, not away
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
#: Redirect HTTP to HTTPS (health and metrics are exempt).
#: Default: on in production (`DJANGO_DEBUG=0`), off in debug mode
SECURE_SSL_REDIRECT: bool = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
#: HSTS max-age.
#: Default: `31536000` in production, `0` in debug mode
SECURE_HSTS_SECONDS: int = env.int("DJANGO_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
#: HSTS preload flag.
#: Default: on in production, off in debug mode
SECURE_HSTS_PRELOAD: bool = env.bool("DJANGO_HSTS_PRELOAD", default=not DEBUG)
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True  # no script of ours reads it: forms carry the token
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"

# --- Who may do what (access): single sign-on, local passwords, sessions, failed logins -------

#: The OpenID Connect provider's issuer URL (its discovery document is read from
#: `<issuer>/.well-known/openid-configuration` at the first login); empty: no single sign-on.
OIDC_ISSUER: str = env.str("OIDC_ISSUER", default="")
#: The control plane's client id at the provider.
OIDC_RP_CLIENT_ID: str = env.str("OIDC_CLIENT_ID", default="")
#: The client's secret at the provider (empty: a public client, authenticated by PKCE alone).
OIDC_RP_CLIENT_SECRET: str = env.str("OIDC_CLIENT_SECRET", default="")
if OIDC_ISSUER and not OIDC_RP_CLIENT_ID:
    raise ImproperlyConfigured("OIDC_CLIENT_ID must be set when OIDC_ISSUER is")
#: Scopes asked of the provider.
OIDC_RP_SCOPES: str = env.str("OIDC_SCOPES", default="openid email profile groups")
#: The claim (in the ID token or the userinfo answer) that lists the person's groups.
OIDC_GROUPS_CLAIM: str = env.str("OIDC_GROUPS_CLAIM", default="groups")
#: The ID token's signing algorithm (keys from the provider's JWKS).
OIDC_RP_SIGN_ALGO: str = env.str("OIDC_SIGN_ALGO", default="RS256")
#: Verify the provider's TLS certificate: `1`, `0`, or the path of a CA bundle.
#: Default: `1`
_oidc_verify = env.str("OIDC_VERIFY_SSL", default="1")
OIDC_VERIFY_SSL: bool | str = {"1": True, "true": True, "0": False, "false": False}.get(
    _oidc_verify.lower(), _oidc_verify
)
#: Seconds for each request to the provider.
OIDC_TIMEOUT: float = env.float("OIDC_TIMEOUT", default=10)
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_STORE_ID_TOKEN = False
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
OIDC_CALLBACK_CLASS = "access.oidc.CallbackView"
OIDC_AUTHENTICATE_CLASS = "access.oidc.LoginView"
LOGIN_REDIRECT_URL = "/admin/"
LOGIN_REDIRECT_URL_FAILURE = "/admin/login/"
LOGIN_URL = "/admin/login/"
#: Local passwords: `on` (everyone with one), `break-glass` (superusers only, each login loud in the
#: log and the audit trail) or `off`.
#: Default: `on` without single sign-on, `break-glass` with it
LOCAL_LOGIN: str = env.str("LOCAL_LOGIN", default="break-glass" if OIDC_ISSUER else "on")
if LOCAL_LOGIN not in ("on", "break-glass", "off"):
    raise ImproperlyConfigured(f"LOCAL_LOGIN must be on, break-glass or off, not {LOCAL_LOGIN!r}")
if LOCAL_LOGIN == "off" and not OIDC_ISSUER:
    raise ImproperlyConfigured("LOCAL_LOGIN=off needs single sign-on (OIDC_ISSUER): nobody could log in")
AUTHENTICATION_BACKENDS = [
    # First: an account or address locked out for failed logins gets no further.
    "axes.backends.AxesStandaloneBackend",
    "access.backends.OIDCBackend",
    "access.backends.LocalPasswordBackend",
    "access.backends.RoleBackend",
]
#: Seconds without a request after which a session ends.
SESSION_IDLE_SECONDS: int = env.int("SESSION_IDLE_SECONDS", default=3600)
#: Seconds after its login at which a session ends, however busy.
SESSION_MAX_SECONDS: int = env.int("SESSION_MAX_SECONDS", default=43200)
if not 0 < SESSION_IDLE_SECONDS <= SESSION_MAX_SECONDS:
    raise ImproperlyConfigured("0 < SESSION_IDLE_SECONDS <= SESSION_MAX_SECONDS must hold")
SESSION_COOKIE_AGE = SESSION_IDLE_SECONDS
#: Failed logins after which an account, or an address, is locked out (django-axes).
AXES_FAILURE_LIMIT: int = env.int("LOGIN_FAILURE_LIMIT", default=5)
#: Minutes a locked-out account or address waits.
LOGIN_LOCKOUT_MINUTES: float = env.float("LOGIN_LOCKOUT_MINUTES", default=15)
if AXES_FAILURE_LIMIT < 1 or LOGIN_LOCKOUT_MINUTES <= 0:
    raise ImproperlyConfigured("LOGIN_FAILURE_LIMIT must be at least 1 and LOGIN_LOCKOUT_MINUTES positive")
AXES_COOLOFF_TIME = LOGIN_LOCKOUT_MINUTES / 60  # hours
# Per account and per address, each on its own: guessing one account from many addresses, or many
# accounts from one address, is stopped alike.
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "access.lockout.locked_out"
AXES_CLIENT_IP_CALLABLE = "access.lockout.client_address"
#: Addresses or CIDRs of the ingress in front of the web role, whose `X-Forwarded-For` names the client (the
#: address failed logins are counted by); empty: the connection's own address.
WEB_TRUSTED_PROXIES: list[str] = env.list("WEB_TRUSTED_PROXIES", default=[])
for _proxy in WEB_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"WEB_TRUSTED_PROXIES: {_proxy!r} is not an address or CIDR") from None
AXES_VERBOSE = False

# --- Logging ---------------------------------------------------------------------------------

#: `text`, or `json`: one JSON object per line (`time`, `level`, `logger`, `message`, `exc_info`) for log
#: collectors.
LOG_FORMAT: str = env.str("LOG_FORMAT", default="text")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be 'text' or 'json', not {LOG_FORMAT!r}")
#: Root log level.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "kernel.logfmt.JsonFormatter"},
    },
    "filters": {
        "beat_sends_at_debug": {"()": "kernel.logfmt.BeatSendsAtDebug"},
        "database_unavailable_one_line": {"()": "kernel.logfmt.DatabaseUnavailableOneLine"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["beat_sends_at_debug", "database_unavailable_one_line"],
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
        "console.api.authentication.ModuleCredentialAuthentication",
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
    # Lists and lookups of a Kyma's rows hold only the user's Kymas' (access.scope).
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "access.filters.ScopeFilterBackend",
    ],
    "DEFAULT_PAGINATION_CLASS": "kernel.api.pagination.Pagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "kernel.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Kyma fleet control plane API",
    "DESCRIPTION": (
        "The fleet as documents in the upstream CR shapes (Kyma, Watcher, ...), plus rollouts, "
        "certificates, events and the audit trail."
    ),
    "VERSION": "v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "OAS_VERSION": "3.1.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery ----------------------------------------------------------------------------------

#: The Celery broker, e.g. `redis://host:6379/0` or `amqp://...`; the default is a directory under the state
#: dir (Celery's filesystem transport).
CELERY_BROKER_URL: str = env.str("CELERY_BROKER_URL", default="filesystem://localhost/")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _queue_dir = STATE_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        (_queue_dir / _sub).mkdir(parents=True, exist_ok=True)
    #: Filesystem broker: seconds between polls (0.1 s keeps event-to-reconcile latency low at negligible
    #: cost).
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
    #: Redis: seconds before an unacknowledged task is redelivered; it must exceed the longest task and ETA.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=600)
    }
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
# The (disabled) result backend is one object for all of a process's threads: each publish's result
# object asks for it, and a thread that had none looked it up by name, scanning the installed
# packages' entry points (20 ms, paid by a listener thread's first event; fleet/queue/warm.py).
CELERY_RESULT_BACKEND_THREAD_SAFE = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A reconcile spends most of its time waiting on runtime API servers in other regions (20-150 ms
# a round trip), so each worker process runs many at once in threads (bench/fleet.py measured the
# threads pool against prefork). Each thread keeps its own database connection: workers x
# WORKER_CONCURRENCY must stay well below PostgreSQL's max_connections.
#: Celery pool of `celery -A controlplane worker` (and `make run`): `threads` runs many reconciles at once in
#: one process while they wait on runtime API servers; `prefork` or `solo` otherwise.
CELERY_WORKER_POOL: str = env.str("WORKER_POOL", default="threads")
#: Reconciles one worker process runs at once (threads); run about one worker process per core. Each thread
#: holds one database connection, so worker processes x this must stay below PostgreSQL's `max_connections`
#: (100 by default).
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
#: Seconds: how precisely a worker starts delayed tasks (e.g. the listener's delay).
CELERY_WORKER_TIMER_PRECISION: float = env.float("CELERY_WORKER_TIMER_PRECISION", default=0.05)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
# django-celery-beat's database scheduler, elected: any number of beats, one sends (controlplane/beat.py).
CELERY_BEAT_SCHEDULER = "controlplane.beat:ElectedScheduler"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_DEFAULT_QUEUE = "controlplane"
# Publishing must fail fast (the listener answers 503) instead of hanging on a dead broker.
#: Seconds before a publish gives up (the caller then answers 503).
CELERY_BROKER_CONNECTION_TIMEOUT: float = env.float("CELERY_BROKER_CONNECTION_TIMEOUT", default=2.0)
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2}
# A worker outlives broker outages (controlplane/worker.py): it reconnects for ever, at most this
# many seconds apart, and gives back what it held when the connection went (controlplane/broker.py).
CELERY_WORKER_CONSUMER = "controlplane.worker:Consumer"
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
#: Seconds at most between a worker's tries to reconnect to a lost broker (it never gives up).
WORKER_RECONNECT_MAX: float = env.float("WORKER_RECONNECT_MAX", default=2.0)
if WORKER_RECONNECT_MAX <= 0:
    raise ImproperlyConfigured("WORKER_RECONNECT_MAX must be positive")
# Running tasks go on when the connection is lost (their messages are queued again on reconnect;
# a reconcile is idempotent and leased): Celery 6 would cancel them by default.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False

#: Beat's election: the leading beat renews its lease every quarter of this (from a thread of its own, so a
#: slow send never delays it); a standby takes over this long (plus one poll) after the leader died, at once
#: after it stopped on purpose.
BEAT_LEASE_SECONDS: float = env.float("BEAT_LEASE_SECONDS", default=4.0)
#: Seconds between a standing-by beat's tries to take the lease (the first retry's delay while the database
#: is away, doubling up to `BEAT_LEASE_SECONDS`).
BEAT_STANDBY_POLL: float = env.float("BEAT_STANDBY_POLL", default=0.5)
if not 0 < BEAT_STANDBY_POLL < BEAT_LEASE_SECONDS:
    raise ImproperlyConfigured("BEAT_STANDBY_POLL must be positive and below BEAT_LEASE_SECONDS")
#: Side port of each beat process (empty: none): `/healthz` (liveness: its loop comes round), `/readyz` (its
#: last lease round reached the database, leader and standby alike, and the body says which it is), `/metrics`
#: (`deploy/kubernetes` uses 9104).
BEAT_METRICS_BIND: str = env.str("BEAT_METRICS_BIND", default="")
#: Side port of each worker process (empty: none): `/healthz` (liveness: the process runs), `/readyz`
#: (database and broker answer), `/metrics` (`deploy/kubernetes` uses 9103).
WORKER_METRICS_BIND: str = env.str("WORKER_METRICS_BIND", default="")

# --- Control plane ---------------------------------------------------------------------------

#: Address of the web role.
WEB_BIND: str = env.str("WEB_BIND", default="127.0.0.1:8000")
#: gunicorn processes of the web role.
WEB_WORKERS: int = env.int("WEB_WORKERS", default=2)
#: URL printed for people.
#: Default: `http://<WEB_BIND>`
PUBLIC_URL: str = env.str("CONTROLPLANE_PUBLIC_URL", default=f"http://{WEB_BIND}")

# --- Reconcile scheduling ----------------------------------------------------------------------

#: Seconds after which a reconcile mark whose task vanished is claimed again.
RECONCILE_QUEUED_TTL: int = env.int("RECONCILE_QUEUED_TTL", default=120)
# (fleet/queue/requests.py: "while the broker's queue is short" is OVERDUE_BACKLOG messages.)
#: Seconds after its due time a queued reconcile that never started counts as lost (its publisher or the
#: worker holding it died), while the broker's queue is short: beat's sweep queues it again (a copy of a
#: task that was only late costs one more reconcile; bench/chaos.py's edit -> reconcile max was 59.8 s
#: at 30 s, with workers killed holding such tasks).
RECONCILE_OVERDUE_AFTER: float = env.float("RECONCILE_OVERDUE_AFTER", default=10)
#: How long a reconcile's lease on its Kyma lasts unless renewed: a keeper thread in each worker
#: process renews it every quarter of this while the reconcile runs, so a worker that dies frees
#: its Kymas within it (beat's sweep then queues them again).
RECONCILE_LEASE_SECONDS: int = env.int("RECONCILE_LEASE_SECONDS", default=8)

# --- PKI -------------------------------------------------------------------------------------

#: Key of new CAs: `ecdsa-p256`, `rsa-2048`, `rsa-3072`, `rsa-4096`.
PKI_CA_KEY_TYPE: str = env.str("PKI_CA_KEY_TYPE", default="ecdsa-p256")
#: Lifetime of a new CA.
PKI_CA_VALIDITY_DAYS: float = env.float("PKI_CA_VALIDITY_DAYS", default=90)
#: Subject CN of new CAs.
PKI_CA_COMMON_NAME: str = env.str("PKI_CA_COMMON_NAME", default="Kyma fleet control plane CA")
#: Optional subject field O of new CAs.
PKI_CA_ORGANIZATION: str = env.str("PKI_CA_ORGANIZATION", default="")
#: Optional subject field OU of new CAs.
PKI_CA_ORGANIZATIONAL_UNIT: str = env.str("PKI_CA_ORGANIZATIONAL_UNIT", default="")
#: Optional subject field C of new CAs.
PKI_CA_COUNTRY: str = env.str("PKI_CA_COUNTRY", default="")
#: Optional subject field L of new CAs.
PKI_CA_LOCALITY: str = env.str("PKI_CA_LOCALITY", default="")
#: Start a CA rotation this long before the issuing CA expires; runtimes then have the grace period to receive
#: the new bundle before the listener presents a certificate from the new CA.
PKI_CA_ROTATE_BEFORE_DAYS: float = env.float("PKI_CA_ROTATE_BEFORE_DAYS", default=34)
#: After a rotation, how long the listener (and the gateway's Secret) keeps presenting its old-CA server
#: certificate, while both CAs are trusted; upstream's `--istio-gateway-server-cert-switch-grace-period`.
PKI_CA_GRACE_DAYS: float = env.float("PKI_CA_GRACE_DAYS", default=4)
#: Key of runtime and listener certificates.
PKI_CERT_KEY_TYPE: str = env.str("PKI_CERT_KEY_TYPE", default="ecdsa-p256")
#: Lifetime of runtime and listener certificates (never beyond the CA).
PKI_CERT_VALIDITY_DAYS: float = env.float("PKI_CERT_VALIDITY_DAYS", default=60)
#: Renew this long before expiry.
PKI_CERT_RENEW_BEFORE_DAYS: float = env.float("PKI_CERT_RENEW_BEFORE_DAYS", default=30)
#: Extra SANs of every runtime certificate.
PKI_EXTRA_DNS_NAMES: list[str] = env.list("PKI_EXTRA_DNS_NAMES", default=[])
#: Certificates renewed per maintenance run.
PKI_RENEW_BATCH: int = env.int("PKI_RENEW_BATCH", default=500)
#: Seconds between beat's PKI maintenance runs.
PKI_MAINTAIN_INTERVAL: float = env.float("PKI_MAINTAIN_INTERVAL", default=300)
#: SANs of the listener's server certificate (names runtime watchers dial).
LISTENER_HOSTNAMES: list[str] = env.list("LISTENER_HOSTNAMES", default=["localhost", "127.0.0.1"])
#: Keep the Istio ingress gateway's credential Secret current from inside the cluster the control plane runs
#: in, as upstream's lifecycle-manager does: workers write it with their in-cluster identity (whose only right
#: is that one Secret, `deploy/kubernetes/components/gateway-secret`). Off: write it yourself with
#: `manage.py render_gateway --with-credential` (GitOps).
GATEWAY_SECRET_SYNC: bool = env.bool("GATEWAY_SECRET_SYNC", default=False)
#: Name of the gateway's credential Secret (the Gateway's `credentialName`).
GATEWAY_SECRET_NAME: str = env.str("GATEWAY_SECRET_NAME", default="kcp-listener-gateway-tls")
#: Namespace of that Secret: the Istio ingress gateway's.
GATEWAY_SECRET_NAMESPACE: str = env.str("GATEWAY_SECRET_NAMESPACE", default="istio-system")
#: Seconds between checks of the gateway's Secret (upstream requeues every 5 minutes); a CA rotation or a
#: renewed listener certificate also writes it at once.
GATEWAY_SECRET_INTERVAL: float = env.float("GATEWAY_SECRET_INTERVAL", default=300)
#: Seconds before a failed write of the gateway's Secret is tried again (upstream: 2 s).
GATEWAY_SECRET_RETRY: float = env.float("GATEWAY_SECRET_RETRY", default=2)
if GATEWAY_SECRET_INTERVAL <= 0 or GATEWAY_SECRET_RETRY <= 0:
    raise ImproperlyConfigured("GATEWAY_SECRET_INTERVAL and GATEWAY_SECRET_RETRY must be positive seconds")

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

#: Days the audit trail (who did what, `/api/v1/audit/`) keeps an entry; beat's `kernel.audit_prune` removes
#: older ones every hour.
AUDIT_KEPT_DAYS: float = env.float("AUDIT_KEPT_DAYS", default=90)
if AUDIT_KEPT_DAYS <= 0:
    raise ImproperlyConfigured("AUDIT_KEPT_DAYS must be a positive number of days")
#: Unauthenticated refused writes (no key, a wrong key, no session) recorded in the audit trail per minute,
#: across every process; all of them are counted in `controlplane_unauthenticated_refusals_total`.
AUDIT_UNAUTHENTICATED_PER_MINUTE: int = env.int("AUDIT_UNAUTHENTICATED_PER_MINUTE", default=10)
if AUDIT_UNAUTHENTICATED_PER_MINUTE < 0:
    raise ImproperlyConfigured("AUDIT_UNAUTHENTICATED_PER_MINUTE must be 0 or more")

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
if GATEWAY_SECRET_SYNC:
    CELERY_BEAT_SCHEDULE["gateway-secret"] = {
        "task": "pki.gateway_secret_sync",
        "schedule": GATEWAY_SECRET_INTERVAL,
        "options": {"expires": GATEWAY_SECRET_INTERVAL},
    }

# --- Listener (WatchEvents from runtime watchers) -----------------------------------------------

#: Address of the listener role.
LISTENER_BIND: str = env.str("LISTENER_BIND", default="127.0.0.1:8443")
#: `direct` (TLS with client certificates here) or `proxy` (behind Istio/Envoy, plain HTTP, identity from
#: `X-Forwarded-Client-Cert`).
LISTENER_MODE: str = env.str("LISTENER_MODE", default="direct")
if LISTENER_MODE not in ("direct", "proxy"):
    raise ImproperlyConfigured(f"LISTENER_MODE must be 'direct' or 'proxy', got {LISTENER_MODE!r}")
#: Addresses/CIDRs allowed to send `X-Forwarded-Client-Cert` (proxy mode).
LISTENER_TRUSTED_PROXIES: list[str] = env.list("LISTENER_TRUSTED_PROXIES", default=[])
#: On contract v2 too, require the Kyma's `skr-domain` as SAN of the client certificate.
LISTENER_SAN_PINNING: bool = env.bool("LISTENER_SAN_PINNING", default=True)
#: gunicorn processes of the listener.
LISTENER_WORKERS: int = env.int("LISTENER_WORKERS", default=2)
#: gunicorn threads per listener process.
LISTENER_THREADS: int = env.int("LISTENER_THREADS", default=8)
#: Plain-HTTP side port of the listener: `/metrics`, `/healthz`, `/readyz` (database, broker and, in direct
#: mode, its TLS files usable, else 503).
LISTENER_METRICS_BIND: str = env.str("LISTENER_METRICS_BIND", default="127.0.0.1:9102")
#: The component whose events reconcile the Kyma itself (upstream: lifecycle-manager).
LISTENER_RECONCILE_COMPONENT: str = env.str("LISTENER_RECONCILE_COMPONENT", default="lifecycle-manager")
#: Seconds between an event that does not name its change (upstream's watcher) and the reconcile it queues: a
#: validating webhook fires before the API server stores the change, so the reconcile waits this long to read
#: it (and bursts coalesce meanwhile).
LISTENER_RECONCILE_DELAY: float = env.float("LISTENER_RECONCILE_DELAY", default=0.1)
#: How far other hosts' clocks may run ahead (the listener skips queue checks for events a queued reconcile
#: provably covers).
LISTENER_CLOCK_SKEW: float = env.float("LISTENER_CLOCK_SKEW", default=0.025)
#: Least time between an event and the moment the reconcile covering it reads the runtime (an event that finds
#: its reconcile due sooner makes it wait `LISTENER_RECONCILE_DELAY`; `0` turns it off; otherwise margin +
#: `LISTENER_CLOCK_SKEW` must not exceed `LISTENER_RECONCILE_DELAY`).
LISTENER_EVENT_MARGIN: float = env.float("LISTENER_EVENT_MARGIN", default=0.05)
if LISTENER_EVENT_MARGIN < 0 or (
    LISTENER_EVENT_MARGIN > 0 and LISTENER_EVENT_MARGIN + LISTENER_CLOCK_SKEW > LISTENER_RECONCILE_DELAY
):
    raise ImproperlyConfigured(
        f"LISTENER_EVENT_MARGIN ({LISTENER_EVENT_MARGIN}) plus LISTENER_CLOCK_SKEW ({LISTENER_CLOCK_SKEW}) "
        f"must not exceed LISTENER_RECONCILE_DELAY ({LISTENER_RECONCILE_DELAY}): the reconcile an event "
        "queues waits that delay (set LISTENER_EVENT_MARGIN=0 to turn the margin off)"
    )
#: Event records kept per Kyma.
LISTENER_EVENTS_KEPT: int = env.int("LISTENER_EVENTS_KEPT", default=100)
#: Seconds a 503 (queue or database unavailable) asks the runtime watcher to wait, in `Retry-After`; our
#: watcher retries then instead of backing off up to `BACKOFF_MAX`.
LISTENER_RETRY_AFTER: int = env.int("LISTENER_RETRY_AFTER", default=2)
if LISTENER_RETRY_AFTER < 0:
    raise ImproperlyConfigured("LISTENER_RETRY_AFTER must be 0 or more seconds")
#: How long a listener process caches Kyma and Watcher lookups (the answer it uses is never older;
#: the entries of runtimes in use are read again ahead of their expiry, every half of it).
LISTENER_CACHE_SECONDS: float = env.float("LISTENER_CACHE_SECONDS", default=2.0)
#: Seconds between checks for a new listener certificate or CA bundle.
LISTENER_TLS_REFRESH: float = env.float("LISTENER_TLS_REFRESH", default=30.0)
#: Where events of other components go (`serviceInfo` fields).
LISTENER_FORWARD_URL: str = env.str(
    "LISTENER_FORWARD_URL", default="http://{name}.{namespace}.svc.cluster.local:{port}"
)
#: Seconds per forwarding attempt.
LISTENER_FORWARD_TIMEOUT: float = env.float("LISTENER_FORWARD_TIMEOUT", default=5.0)
#: The listener's Service, where the rendered Istio VirtualServices route.
LISTENER_SERVICE_NAME: str = env.str("LISTENER_SERVICE_NAME", default="controlplane-listener")
#: Namespace of the listener's Service (see `LISTENER_SERVICE_NAME`).
LISTENER_SERVICE_NAMESPACE: str = env.str("LISTENER_SERVICE_NAMESPACE", default="kcp-system")

if ROLE == "listener":
    # A health-check query before every request would double the listener's database round trips;
    # a broken connection instead fails one request with 503 (the watcher retries) and is replaced.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
#: Reconcile records kept per Kyma.
RECONCILE_RECORDS_KEPT: int = env.int("RECONCILE_RECORDS_KEPT", default=50)
#: Where "a reconcile is queued" marks live: `auto` (Redis when the broker is Redis, else the database),
#: `database`, or a `redis://` URL.
_flags_url = env.str("RECONCILE_FLAGS_URL", default="auto")
RECONCILE_FLAGS_URL: str = (
    (CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else "")
    if _flags_url == "auto"
    else ("" if _flags_url == "database" else _flags_url)
)
#: Prefix of those Redis keys.
RECONCILE_FLAGS_PREFIX: str = env.str("RECONCILE_FLAGS_PREFIX", default="controlplane")

# --- Runtime watcher (what the control plane deploys into each runtime) ----------------------------

#: Image of the runtime watcher Deployment rendered into every runtime.
WATCHER_IMAGE: str = env.str("WATCHER_IMAGE", default="ghcr.io/kyma-fleet/runtime-watcher:0.1.0")
#: The listener as runtimes reach it (`host:port`; the host must be in `LISTENER_HOSTNAMES`).
#: Default: `localhost:<LISTENER_BIND port>`
WATCHER_KCP_ADDR: str = env.str("WATCHER_KCP_ADDR", default=f"localhost:{LISTENER_BIND.rpartition(':')[2]}")
#: Seconds between the runtime watchers' heartbeats.
WATCHER_HEARTBEAT_INTERVAL: int = env.int("WATCHER_HEARTBEAT_INTERVAL", default=30)
#: CPU limit of the runtime watcher container.
WATCHER_CPU_LIMIT: str = env.str("WATCHER_CPU_LIMIT", default="100m")
#: Memory limit of the runtime watcher container.
WATCHER_MEMORY_LIMIT: str = env.str("WATCHER_MEMORY_LIMIT", default="128Mi")
#: A docker config JSON (`.dockerconfigjson`) for a private registry: rendered into every runtime as the
#: Secret `skr-webhook-pull-secret` the watcher Deployment pulls `WATCHER_IMAGE` with; read at every render (a
#: rotated file needs no restart), checked at start (unreadable or not JSON with `auths`:
#: `ImproperlyConfigured`); its content is never shown.
WATCHER_IMAGE_PULL_SECRET_FILE: str = env.str("WATCHER_IMAGE_PULL_SECRET_FILE", default="")
if WATCHER_IMAGE_PULL_SECRET_FILE:
    try:
        read_docker_config(WATCHER_IMAGE_PULL_SECRET_FILE)
    except DockerConfigError as _exc:
        raise ImproperlyConfigured(f"WATCHER_IMAGE_PULL_SECRET_FILE: {_exc}") from None
#: A watcher without a heartbeat this long is silent (`0` turns the detection off, and every reconcile then
#: reads the runtime's Kyma and module CRs).
WATCHER_SILENT_AFTER: int = env.int("WATCHER_SILENT_AFTER", default=120)
# How often beat looks for Ready Kymas whose watcher fell silent (they are reconciled at once).
#: Seconds between beat's checks for silent watchers.
WATCHER_SILENT_CHECK_INTERVAL: float = env.float("WATCHER_SILENT_CHECK_INTERVAL", default=30)
if WATCHER_SILENT_AFTER < 0:
    raise ImproperlyConfigured("WATCHER_SILENT_AFTER must be 0 (off) or a number of seconds")

# --- Maintenance windows and rollouts ------------------------------------------------------------

#: Upstream's maintenance-window policy as a JSON file, used while the admin holds none; read again when it
#: changes, checked at start (`ImproperlyConfigured` naming the field).
MAINTENANCE_POLICY_FILE: str = env.str("MAINTENANCE_POLICY_FILE", default="")
if MAINTENANCE_POLICY_FILE:
    try:
        read_policy_file(MAINTENANCE_POLICY_FILE)
    except PolicyError as _exc:
        raise ImproperlyConfigured(f"MAINTENANCE_POLICY_FILE: {_exc}") from None
#: Seconds of a maintenance window that must be left for it to count as open (upstream's
#: `--min-maintenance-window-size`).
MAINTENANCE_WINDOW_MIN_SIZE: float = env.float("MAINTENANCE_WINDOW_MIN_SIZE", default=1200)
if MAINTENANCE_WINDOW_MIN_SIZE < 0:
    raise ImproperlyConfigured("MAINTENANCE_WINDOW_MIN_SIZE must be a number of seconds (0 or more)")
# Waves and gates per kind of change ({"ModuleVersion": {"waves": [...], "gate": {...}}, ...}), over
# the defaults (1 canary, 5 %, 25 %, 100 %; checked by the fleet app when it starts).
try:
    #: JSON: waves and gate per kind of change (`ModuleVersion`, `Watcher`, `RuntimeWatcher`, `KymaSpec`),
    #: over the defaults (a canary, 5 %, 25 %, 100 %; Ready within 900 s, at most 2 % failing, no bake);
    #: checked at start (see the operators' page on rollouts).
    #: Default: `{}` (the defaults)
    ROLLOUT_POLICY: dict = json.loads(env.str("ROLLOUT_POLICY", default="") or "{}")
except ValueError as _exc:
    raise ImproperlyConfigured(f"ROLLOUT_POLICY is not JSON: {_exc}") from None
if not isinstance(ROLLOUT_POLICY, dict):
    raise ImproperlyConfigured("ROLLOUT_POLICY must be a JSON object of policies by kind of change")
#: Seconds between beat's runs of `controlplane.rollouts_advance` (judge the current waves, start the next).
ROLLOUT_ADVANCE_INTERVAL: float = env.float("ROLLOUT_ADVANCE_INTERVAL", default=2.0)

# --- Reconciles of runtimes ----------------------------------------------------------------------

#: Seconds for runtime API server connections.
RUNTIME_CONNECT_TIMEOUT: float = env.float("RUNTIME_CONNECT_TIMEOUT", default=3.0)
#: Seconds for runtime API server answers.
RUNTIME_READ_TIMEOUT: float = env.float("RUNTIME_READ_TIMEOUT", default=15.0)
#: Calls one reconcile makes to its runtime at once when at least 4 do not depend on each other (fewer are
#: not worth a new connection's handshakes): the applies of one wave (the watcher's PriorityClass,
#: NetworkPolicies, Secret and Services; then its Deployment; then its webhooks), the reads a full reconcile
#: compares with. A runtime is a round trip away, so 8 applies at once wait about 3 round trips, not 8. Each
#: worker process keeps up to `WORKER_CONCURRENCY` x (this - 1) threads for them; the connections opened for
#: them are closed after the reconcile but one. 1: one call after the other.
RUNTIME_PARALLEL_CALLS: int = env.int("RUNTIME_PARALLEL_CALLS", default=8)
if RUNTIME_PARALLEL_CALLS < 1:
    raise ImproperlyConfigured("RUNTIME_PARALLEL_CALLS must be at least 1")
#: Server-side apply field manager in the runtimes.
RUNTIME_FIELD_MANAGER: str = env.str("RUNTIME_FIELD_MANAGER", default="kyma-control-plane")
#: Runtime clients (each with its kept-alive connection) cached per worker process, least recently used
#: dropped: about 20 KiB each, so 10,000 cost ~200 MiB per process.
RUNTIME_CLIENT_CACHE: int = env.int("RUNTIME_CLIENT_CACHE", default=1000)
#: Requests per second each worker process sends one runtime's API server at most, in the steady state
#: (upstream's `k8s-skr-client-qps`): a runaway reconcile cannot flood a runtime. A request over the rate
#: waits its turn (counted in `controlplane_runtime_requests_throttled_total`). 0: no limit.
RUNTIME_CLIENT_QPS: float = env.float("RUNTIME_CLIENT_QPS", default=50)
#: Requests a runtime's client may send at once above `RUNTIME_CLIENT_QPS` before it waits (upstream's
#: `k8s-skr-client-burst`).
RUNTIME_CLIENT_BURST: int = env.int("RUNTIME_CLIENT_BURST", default=100)
if RUNTIME_CLIENT_QPS < 0 or RUNTIME_CLIENT_BURST < 1:
    raise ImproperlyConfigured(
        "RUNTIME_CLIENT_QPS must be 0 (no limit) or more, RUNTIME_CLIENT_BURST 1 or more"
    )
#: Seconds after a Kyma's deletion began when what a finalizer still holds in its runtime (a module CR whose
#: operator is gone) is purged: its finalizers removed so the deletion completes (upstream's
#: `purge-finalizer-timeout`).
KYMA_PURGE_AFTER: float = env.float("KYMA_PURGE_AFTER", default=300)
#: Comma-separated CRD names (`<plural>.<group>`, shell patterns: `*.helm.cattle.io`) whose objects are
#: never purged: a Kyma's deletion waits for them (upstream's `skip-finalizer-purging-for`).
KYMA_PURGE_SKIP: list[str] = env.list("KYMA_PURGE_SKIP", default=[])
#: Seconds between checks of the runtime objects whose drift can wait (CRD, PriorityClass, NetworkPolicies,
#: Services), and longest a periodic or targeted reconcile with a live runtime watcher trusts its events
#: instead of reading the runtime's Kyma and module CRs; the watcher's Secret, Deployment and webhooks and
#: synced manifests are checked by every periodic and full reconcile (see the contributors' page on
#: reconciles).
RUNTIME_RECHECK_INTERVAL: float = env.float("RUNTIME_RECHECK_INTERVAL", default=1800)
#: Seconds between periodic reconciles of a Ready Kyma.
RECONCILE_READY_INTERVAL: float = env.float("RECONCILE_READY_INTERVAL", default=300)
#: The same for Processing and Deleting.
RECONCILE_PROCESSING_INTERVAL: float = env.float("RECONCILE_PROCESSING_INTERVAL", default=5)
#: The same for Warning (also a Kyma whose watcher is silent).
RECONCILE_WARNING_INTERVAL: float = env.float("RECONCILE_WARNING_INTERVAL", default=30)
#: Error: first and longest retry interval (doubling in between).
RECONCILE_ERROR_BACKOFF: list[float] = [
    float(v) for v in env.list("RECONCILE_ERROR_BACKOFF", default=["5", "30"])
]
# A Kyma is reconciled at most once per this many seconds: a runtime that keeps changing cannot
# crowd the rest of the fleet out of the workers (its events coalesce into the deferred reconcile).
#: For runtime events (and the periodic sweeps), a Kyma is reconciled at most once per this many seconds
#: (events meanwhile coalesce into the next one, published due when the spacing ends); a budget, not a delay:
#: a reconcile after a quiet period (none in the two spacings before the last one) runs at once. Changes made
#: in the control plane (Kyma, Module, SyncResource, ModuleConfig status writes) may be the second reconcile
#: within a spacing, not the third.
RECONCILE_MIN_SPACING: float = env.float("RECONCILE_MIN_SPACING", default=1.0)
# Of each worker process's slots, how many reconciles of runtimes that keep changing (their events
# came while the spacing held them back) may hold at once; the rest stay for the other runtimes.
# bench/module_chain.py (b), quiet runtimes' edits under 100 edits/s on 50 busy ones, with targeted
# reconciles: with 2 of 16 slots p99 0.9-1.6 s in four runs (p50 0.37-0.58 s), with 4 p99 1.96 and
# 1.98 s (p50 0.80-0.86 s), at about the same reconciles/s (see the benchmarks page of the docs).
#: Of each worker process's slots, how many reconciles of *busy* runtimes may hold at once: runtimes whose
#: events keep arriving while the spacing holds them back (for 5 s after the last event that found one of its
#: tasks spaced or queued already), and the control plane's changes for them (a module manager's answers). The
#: other slots stay free for the rest of the fleet; a busy runtime's task that finds none free retries after
#: its spacing (at least 0.5 s; doubled on each such try, up to 4 s), holding its queue mark, so its events
#: coalesce meanwhile.
#: Default: `WORKER_CONCURRENCY / 8` (at least 1)
RECONCILE_BUSY_SLOTS: int = env.int("RECONCILE_BUSY_SLOTS", default=max(1, CELERY_WORKER_CONCURRENCY // 8))
if RECONCILE_BUSY_SLOTS < 1:
    raise ImproperlyConfigured("RECONCILE_BUSY_SLOTS must be at least 1")
# Longest a reconcile waits for the runtime to store the changes its events reported (our watcher
# says which change it saw): a change another webhook rejected is never stored and ends the wait
# here. Checked with reads every few milliseconds, so a stored change costs no fixed delay.
#: Longest a reconcile reads the runtime waiting for the changes its events named to be stored (a change
#: another webhook rejected ends the wait here).
RECONCILE_STORED_WAIT: float = env.float("RECONCILE_STORED_WAIT", default=1.0)
#: Seconds between beat's scans for Kymas that are due.
RECONCILE_SWEEP_INTERVAL: float = env.float("RECONCILE_SWEEP_INTERVAL", default=2)
#: Kymas queued per scan at most.
RECONCILE_SWEEP_LIMIT: int = env.int("RECONCILE_SWEEP_LIMIT", default=5000)
#: Periodic reconciles per task: beat's sweep queues due Kymas in batches of this many, each batch
#: reading what its Kymas share once (the Watchers, the catalog, the CA bundle, their certificates,
#: ModuleConfigs and SyncResources) and inserting their records at once (1: one task per Kyma).
RECONCILE_BATCH_SIZE: int = env.int("RECONCILE_BATCH_SIZE", default=20)
#: Seconds one Kyma of such a batch may take before the batch hands the Kymas still to come to a
#: new task (a slow or unreachable runtime then delays the rest of its batch by this much, not by
#: its whole reconcile). A no-op takes a few round trips; a first reconcile about 14.
RECONCILE_BATCH_HANDOFF_AFTER: float = env.float("RECONCILE_BATCH_HANDOFF_AFTER", default=2.0)
if RECONCILE_BATCH_HANDOFF_AFTER <= 0:
    raise ImproperlyConfigured("RECONCILE_BATCH_HANDOFF_AFTER must be positive")
#: Seconds per notification POST to a module manager.
MODULE_NOTIFY_TIMEOUT: float = env.float("MODULE_NOTIFY_TIMEOUT", default=5)

# --- Watches of ModuleConfigs (GET /api/v1/moduleconfigs/?watch=true) -------------------------------

#: Threads per web process for ModuleConfig watches, on top of `WEB_THREADS`; also the most watches one
#: process serves (then 503).
WEB_WATCH_THREADS: int = env.int("WEB_WATCH_THREADS", default=32)
#: Open watches per API token (or session user); more answer 429.
MODULECONFIG_WATCH_PER_CREDENTIAL: int = env.int("MODULECONFIG_WATCH_PER_CREDENTIAL", default=10)
#: Seconds between a watch's bookmarks (also how soon a vanished client's slot is noticed).
MODULECONFIG_WATCH_BOOKMARK_INTERVAL: float = env.float("MODULECONFIG_WATCH_BOOKMARK_INTERVAL", default=10)
#: Longest watch in seconds (`timeoutSeconds` may ask for less); the client resumes.
MODULECONFIG_WATCH_TIMEOUT: float = env.float("MODULECONFIG_WATCH_TIMEOUT", default=1800)
#: Seconds between a web process's reads of new revisions when nothing announced one (SQLite has no
#: notifications; with PostgreSQL `LISTEN` or Redis pub/sub this only covers a lost announcement).
#: Default: `0.1` on SQLite, else `5`
MODULECONFIG_WATCH_POLL_INTERVAL: float = env.float(
    "MODULECONFIG_WATCH_POLL_INTERVAL",
    default=0.1 if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3" else 5,
)
#: Seconds after which the watch slot of a dead process is free again (at least twice the bookmark interval).
MODULECONFIG_WATCH_SLOT_TTL: float = env.float("MODULECONFIG_WATCH_SLOT_TTL", default=60)
#: Days a deleted ModuleConfig is remembered for resumed watches (a watch from before that answers 410: start
#: again from 0).
MODULECONFIG_DELETIONS_KEPT_DAYS: int = env.int("MODULECONFIG_DELETIONS_KEPT_DAYS", default=7)
#: Redis for revision announcements when the database is not PostgreSQL (`auto`: the reconcile flags' Redis;
#: empty: poll).
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
