"""``python -m watchers.runtime``: run the watcher until SIGTERM/SIGINT.

Exit codes: 0 after a clean shutdown (or ``--version``), 2 for a configuration problem (one line on
stderr naming the variable), 1 when a server thread died unexpectedly.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence

from watchers.runtime.app import WatcherServer
from watchers.runtime.config import Config, ConfigError
from watchers.runtime.logs import setup_logging
from watchers.runtime.version import VERSION

EXIT_CONFIG = 2
EXIT_FAILURE = 1


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if env is None else env
    if args in (["--version"], ["-version"]):
        print(f"Runtime Watcher version: {environ.get('WATCHER_VERSION') or VERSION}")
        return 0
    if args:
        print(f"runtime-watcher: unexpected arguments {args}; use environment variables", file=sys.stderr)
        return EXIT_CONFIG
    try:
        config = Config.from_env(environ)
    except ConfigError as exc:
        print(f"runtime-watcher: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    setup_logging(config.log_level)
    server = WatcherServer(config)
    try:
        server.start()
    except ConfigError as exc:
        print(f"runtime-watcher: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    healthy = True
    while not stop.wait(0.5):
        healthy, _ = server.health()
        if not healthy:
            break
    server.stop()
    return 0 if healthy else EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
