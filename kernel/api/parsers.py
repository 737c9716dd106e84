"""Request body parsers of the API: one set of rules for every document (``kernel.documents.nesting``):
depth, size, numbers and storable text refused with a 400 naming the problem, never a 500.

YAML bodies go through ``kernel.api.yaml.YAMLParser``, which loads with ``yamlio`` and so
has the same bounds; both are listed here so the settings name one module.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from kernel.documents.nesting import DocumentInvalid, json_loads

from .yaml import YAMLParser

__all__ = ["JSONParser", "YAMLParser"]

SOURCE = "request body"


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, loading through ``nesting.json_loads``: its depth and size bounds,
    integers of at most ``MAX_INTEGER_DIGITS`` digits, finite numbers only (no ``NaN``), and no
    NUL or lone surrogate in any string."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json_loads(stream.read().decode(encoding), source=SOURCE)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"JSON parse error - the body is not {encoding} text: {exc}") from None
        except json.JSONDecodeError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        except DocumentInvalid as exc:
            raise ParseError(str(exc)) from None
