"""A griffe extension for the SDK reference: reStructuredText roles in docstrings become code.

The SDK's docstrings cite names the reStructuredText way (``:class:`Manager```,
``:func:`verify_notification```); Markdown shows those as `Manager` and `verify_notification`.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`~?([^`]+)`")


class RolesAsCode(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
