"""The manager loop: ModuleConfig in, manifests out, status reported, progress kept on disk."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .client import ApiError, Backoff, Client

log = logging.getLogger("kyma_module_sdk")
SYNC_API_VERSION = "controlplane.kyma-project.io/v1alpha1"
# Answers that mean "this server cannot watch": fall back to polling.
NO_WATCH = {400, 404, 405, 406, 501}
# Answers that mean "this credential is not accepted here": retrying cannot help.
REFUSED = {401, 403}


class CredentialRefused(ApiError):
    """The control plane refused the manager's credential (none given, unknown, revoked, or not
    for this module): the manager stops instead of retrying for ever."""


@dataclass(frozen=True)
class ModuleConfig:
    """A module's configuration in one runtime: ``resource`` is the module CR's spec there, and
    ``version`` the module version to run there (a rollout gives runtimes a new one wave by wave;
    empty from a control plane that does not say)."""

    uid: str
    name: str
    namespace: str
    kyma: str
    runtime_id: str
    module: str
    resource: dict[str, Any]
    revision: int
    status: dict[str, Any] = field(default_factory=dict)
    version: str = ""

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> ModuleConfig:
        meta, spec = doc["metadata"], doc.get("spec") or {}
        return cls(
            uid=meta["uid"],
            name=meta["name"],
            namespace=meta.get("namespace", ""),
            kyma=spec.get("kyma", ""),
            runtime_id=spec.get("runtimeID", ""),
            module=spec.get("module", ""),
            resource=spec.get("resource") or {},
            revision=int(meta.get("resourceVersion") or 0),
            status=doc.get("status") or {},
            version=spec.get("version") or "",
        )

    @property
    def fingerprint(self) -> str:
        """What the handler's answer depends on (not the status, which the manager writes)."""
        what = [self.kyma, self.resource, self.version]
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


Handler = Callable[[ModuleConfig], list[dict[str, Any]] | None]


class Manager:
    """Runs a module's manager: ``@manager.handler`` declares the handler, ``run()`` serves.

    ``state_file`` keeps the last revision handled, so a restarted manager resumes there (its
    watch loses nothing and repeats nothing). Without a watch (an older server, a proxy that
    refuses streams) it polls every ``poll_interval`` seconds and tries the watch again later.

    Configs of different runtimes are handled by up to ``concurrency`` threads at once; the
    events of one config one after another, and when a config changed again before its handler
    ran, only its latest version is handled. Of the configs waiting, the one handled longest ago
    goes first: a runtime whose config keeps changing does not hold back the others'. The
    revision kept on disk is the highest below which every event was handled, so a restart
    repeats at most what was in hand.
    """

    def __init__(
        self,
        *,
        api: str,
        token: str,
        module: str,
        state_file: str | None = None,
        poll_interval: float = 5.0,
        client: Client | None = None,
        concurrency: int = 8,
    ) -> None:
        self.client = client or Client(api, token)
        self.token_given = bool(token) or client is not None
        self.module = module
        self.state_file = state_file
        self.poll_interval = poll_interval
        self.revision = self._load_state()
        self._handler: Handler | None = None
        self._handled: dict[str, str] = {}  # uid -> fingerprint of what was last published
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._work = _Dispatcher(self, concurrency)

    # -- declaring -------------------------------------------------------------------------------

    def handler(self, fn: Handler) -> Handler:
        """Decorator: ``fn(config) -> [manifest, ...]`` (``None``: publish nothing, report Ready)."""
        self._handler = fn
        return fn

    # -- state -----------------------------------------------------------------------------------

    def _load_state(self) -> int:
        if not self.state_file or not os.path.exists(self.state_file):
            return 0
        with open(self.state_file) as f:
            return int(json.load(f).get("revision", 0))

    def _save_state(self, revision: int, *, reset: bool = False) -> None:
        self.revision = revision if reset else max(self.revision, revision)
        if not self.state_file:
            return
        folder = os.path.dirname(os.path.abspath(self.state_file))
        with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as f:
            json.dump({"module": self.module, "revision": self.revision}, f)
        os.replace(f.name, self.state_file)  # atomic: a crash leaves the old state or the new one

    # -- serving ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Follow the module's ModuleConfigs until ``stop()`` (or Ctrl-C); errors are retried with
        backoff, except a refused credential: :class:`CredentialRefused`."""
        if self._handler is None:
            raise RuntimeError("declare a handler first: @manager.handler")
        if not self.token_given:
            raise CredentialRefused(
                401, "no credential given: pass the module credential (kcpm_...) as token"
            )
        try:
            self._follow()
        except KeyboardInterrupt:
            log.info("manager of %s stopped at revision %s", self.module, self.revision)
        finally:
            self.stop()

    def main(self) -> None:
        """Run as a program: log to standard error, stop cleanly on Ctrl-C or SIGTERM (what a
        container runtime sends), and end with one line and exit status 2 when the credential is
        refused."""
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        try:
            self.run()
        except CredentialRefused as refused:
            sys.stderr.write(f"{self.module} manager: credential refused ({refused}); stopping\n")
            raise SystemExit(2) from None

    def _follow(self) -> None:
        backoff = Backoff()
        watching, retry_watch_at = True, 0.0
        log.info("manager of %s starts after revision %s", self.module, self.revision)
        while not self.stopping.is_set():
            try:
                if watching or time.monotonic() >= retry_watch_at:
                    watching = True
                    for event in self.client.watch(self.module, self._work.seen):
                        self._work.put(event)
                        backoff.reset()
                        if self.stopping.is_set():
                            return
                    continue  # the server ended the watch (timeout): open the next one
                page = self.client.moduleconfigs_after(self.module, self._work.seen)
                for doc in page:
                    self._work.put({"type": "MODIFIED", "object": doc})
                backoff.reset()
                if len(page) < 500:
                    self.stopping.wait(self.poll_interval)
            except ApiError as error:
                if error.status in REFUSED:
                    raise CredentialRefused(error.status, error.detail) from None
                if error.status == 410:  # the control plane's data was reset: start over
                    log.warning("%s; handling every config again", error.detail)
                    self._work.drain()
                    self.revision, self._handled = 0, {}
                    self._work.restart(0)
                    self._save_state(0, reset=True)
                    continue
                if watching and error.status in NO_WATCH:
                    log.warning("no watch (%s): polling every %ss", error, self.poll_interval)
                    watching, retry_watch_at = False, time.monotonic() + 60
                    continue
                log.warning("%s; retrying", error)
                self.stopping.wait(backoff.next())
            except (OSError, ValueError) as error:
                log.warning("connection to the control plane: %s; retrying", error)
                self.stopping.wait(backoff.next())

    def stop(self) -> None:
        self.stopping.set()
        self._work.wake()

    def _on_event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "DELETED":
            config = ModuleConfig.from_document(obj)
            self.client.call(
                "DELETE", f"/syncresources/{config.namespace}/{self._sync_name(config)}/", missing_ok=True
            )
            self._handled.pop(config.uid, None)
            log.info("%s: module removed from %s, its manifests go too", self.module, config.kyma)
        elif kind in ("ADDED", "MODIFIED"):
            self.handle(ModuleConfig.from_document(obj))

    def _sync_name(self, config: ModuleConfig) -> str:
        return f"{config.kyma}-{self.module}"[:253]

    def handle(self, config: ModuleConfig) -> bool:
        """Run the handler for one config (also usable from a notification receiver); publish
        its manifests and report the state. False when nothing changed since the last time."""
        assert self._handler is not None
        with self._lock:
            if self._handled.get(config.uid) == config.fingerprint:
                return False  # e.g. our own status report coming back with a new revision
        try:
            manifests = self._handler(config)
        except Exception as exc:  # the handler is the team's code: report, do not die
            log.exception("%s: handler failed for %s", self.module, config.kyma)
            self._report(config, "Error", f"handler failed: {exc}"[:500])
            return True
        if manifests is not None:
            self.publish(config, manifests)
        self._report(config, "Ready", "")
        with self._lock:
            self._handled[config.uid] = config.fingerprint
        log.info("%s: %s handled at revision %s", self.module, config.kyma, config.revision)
        return True

    def publish(self, config: ModuleConfig, manifests: list[dict[str, Any]]) -> None:
        """Apply the manifests for the config's runtime as one SyncResource (created or updated)."""
        document = {
            "apiVersion": SYNC_API_VERSION,
            "kind": "SyncResource",
            "metadata": {"name": self._sync_name(config), "namespace": config.namespace},
            "spec": {
                "kyma": config.kyma,
                "module": self.module,
                "manifests": "\n---\n".join(json.dumps(m, sort_keys=True) for m in manifests),
            },
        }
        self.client.call("POST", "/syncresources/", document)

    def _report(self, config: ModuleConfig, state: str, message: str) -> None:
        status = {"state": state, "message": message, "observedRevision": config.revision}
        self.client.call("PUT", f"/moduleconfigs/{config.uid}/status/", status, missing_ok=True)


def _revision(event: dict[str, Any]) -> int:
    return int(((event.get("object") or {}).get("metadata") or {}).get("resourceVersion") or 0)


def _uid(event: dict[str, Any]) -> str:
    return str(((event.get("object") or {}).get("metadata") or {}).get("uid") or "")


class _Dispatcher:
    """Events to handler threads: per config in order, latest wins, progress saved safely.

    ``seen`` is the highest revision received (where a new watch resumes); what is saved is the
    highest revision with nothing at or below it still waiting or in hand. A handler that fails
    (the API refused or was unreachable) is retried with backoff, unless a newer event for the
    same config arrived meanwhile, which replaces it.
    """

    def __init__(self, manager: Manager, threads: int) -> None:
        self.manager = manager
        self.seen = manager.revision
        self._threads = max(1, threads)
        self._lock = threading.Condition()
        self._waiting: dict[str, dict[str, Any]] = {}  # uid -> latest event not yet in hand
        self._order: list[str] = []  # uids waiting, oldest first
        self._last: dict[str, float] = {}  # uid -> when its handling last began (monotonic)
        self._busy: set[str] = set()
        self._open: dict[int, int] = {}  # revision -> events waiting or in hand at it
        self._workers: list[threading.Thread] = []

    def put(self, event: dict[str, Any]) -> None:
        revision, uid = _revision(event), _uid(event)
        if event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):  # a bookmark: progress only
            with self._lock:
                self.seen = max(self.seen, revision)
            self._save()
            return
        with self._lock:
            self._start()
            self.seen = max(self.seen, revision)
            replaced = self._waiting.get(uid)
            if replaced is not None:
                self._close(_revision(replaced))
            else:
                self._order.append(uid)
            self._waiting[uid] = event
            self._open[revision] = self._open.get(revision, 0) + 1
            self._lock.notify()
            # Backpressure: the watch is read no faster than the handlers keep up.
            while len(self._order) > 4 * self._threads and not self.manager.stopping.is_set():
                self._lock.wait(0.5)
        self._save()

    def restart(self, revision: int) -> None:
        with self._lock:
            self.seen = revision

    def drain(self) -> None:
        """Forget what waits (the data behind it is gone) and wait for what is in hand."""
        with self._lock:
            for event in self._waiting.values():
                self._close(_revision(event))
            self._waiting.clear()
            self._order.clear()
            while self._busy and not self.manager.stopping.is_set():
                self._lock.wait(0.5)

    def wake(self) -> None:
        with self._lock:
            self._lock.notify_all()

    def _start(self) -> None:
        if not self._workers:
            for number in range(self._threads):
                worker = threading.Thread(target=self._run, name=f"handler-{number}", daemon=True)
                worker.start()
                self._workers.append(worker)

    def _close(self, revision: int) -> None:
        left = self._open.get(revision, 0) - 1
        if left > 0:
            self._open[revision] = left
        else:
            self._open.pop(revision, None)

    def _take(self) -> tuple[str, dict[str, Any]] | None:
        """The next config to handle: of those waiting and not in hand, the one handled longest
        ago (never handled: first), in arrival order among equals."""
        with self._lock:
            while not self.manager.stopping.is_set():
                free = [(self._last.get(uid, 0.0), index) for index, uid in enumerate(self._order)]
                free = [item for item in free if self._order[item[1]] not in self._busy]
                if free:
                    uid = self._order.pop(min(free)[1])
                    self._busy.add(uid)
                    self._last[uid] = time.monotonic()
                    self._lock.notify_all()  # room for the watch reader
                    return uid, self._waiting.pop(uid)
                self._lock.wait(0.5)
            return None

    def _run(self) -> None:
        backoff = Backoff()
        while (taken := self._take()) is not None:
            uid, event = taken
            try:
                self.manager._on_event(event)
            except (ApiError, OSError, ValueError) as error:
                log.warning("%s: %s; retrying", self.manager.module, error)
                self.manager.stopping.wait(backoff.next())
                with self._lock:
                    self._busy.discard(uid)
                    if uid in self._waiting:  # a newer version replaces the failed one
                        self._close(_revision(event))
                    else:
                        self._waiting[uid] = event
                        self._order.insert(0, uid)
                    self._lock.notify_all()
                continue
            backoff.reset()
            with self._lock:
                self._busy.discard(uid)
                self._close(_revision(event))
                self._lock.notify_all()
            self._save()

    def _save(self) -> None:
        with self._lock:
            done = min(self._open) - 1 if self._open else self.seen
        if done > self.manager.revision:
            with self.manager._lock:
                self.manager._save_state(done)
