"""The documentation build: references generated from the code, diagrams, and their checks.

``mkdocs.yml`` loads :mod:`tools.docs.hooks`; the references (:mod:`.environment`, :mod:`.commands`,
:mod:`.metrics`) are plain functions the tests call too, so a setting, command or metric without a
description fails the suite as well as the build.
"""
