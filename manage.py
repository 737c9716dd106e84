#!/usr/bin/env python
"""Django's command-line utility for the control plane."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.core.management import execute_from_command_line

    from kernel.configuration import settings_loaded

    settings_loaded()  # a bad production setting: one line, not a traceback
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
