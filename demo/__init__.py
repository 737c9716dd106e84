"""Development-only app: simulated runtimes for ``make run`` (``manage.py demo``).

It drives :mod:`runtime_emulator`, which is test and demo code: neither package ships in the
production image, and no product package imports them (import-linter contract). Settings install
this app only where both are importable (``pip install -r requirements-dev.txt``).
"""
