"""The watcher's own version, reported in heartbeats, logs and ``--version``.

Kept in its own module so the image build can overwrite it (or set ``WATCHER_VERSION``) without
touching code that imports it.
"""

VERSION = "0.1.0"
