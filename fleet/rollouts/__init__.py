"""Rollouts: changes that reach many runtimes go out in waves with gates between them.

``services`` (start, pause, resume, abort, roll back), ``engine`` (beat moves waves on),
``targets`` (the reconcile renders each runtime's own target), ``planning`` (who goes in which
wave), ``kinds`` (what each kind of change does) and ``subjects`` (module versions; the watchers
app registers Watchers and the runtime watcher's settings). See ``fleet.models.rollout``. The app
registers its subjects when it is ready (``fleet.apps``).
"""
