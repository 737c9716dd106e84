"""Request body parsers of the API: DRF's, refusing documents nested too deep (400, not 500).

YAML bodies go through ``kernel.api.yaml.YAMLParser``, which loads with ``yamlio`` and so
has the same bounds; both are listed here so the settings name one module.
"""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from kernel.documents.nesting import DocumentTooComplex, check_nesting, too_deep

from .yaml import YAMLParser

__all__ = ["JSONParser", "YAMLParser"]

SOURCE = "request body"


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser with the project's depth and size bounds (``resources.nesting``)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
            check_nesting(data, source=SOURCE)
        except RecursionError:
            raise ParseError(str(too_deep(SOURCE))) from None
        except DocumentTooComplex as exc:
            raise ParseError(str(exc)) from None
        return data
