"""YAML request bodies and responses for the API (``Content-Type``/``Accept: application/yaml``)."""

from __future__ import annotations

import json
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.utils.encoders import JSONEncoder

from kernel.documents.yamlio import DocumentError, dump_yaml, load_documents


class YAMLParser(BaseParser):
    """One document parses to an object; several (``---``) to a list of objects."""

    media_type = "*/yaml"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        try:
            docs = load_documents(stream.read(), source="request body")
        except DocumentError as exc:
            raise ParseError(str(exc)) from exc
        if not docs:
            raise ParseError("request body: no YAML document")
        return docs[0] if len(docs) == 1 else docs


class YAMLRenderer(BaseRenderer):
    """The JSON answer, written as YAML: the data goes through DRF's JSON encoder first, so
    whatever a view answers in JSON (serializer dicts and lists, UUIDs, times, decimals) reads
    the same in YAML, instead of a ``RepresenterError`` for a type YAML's safe dumper lacks."""

    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: dict | None = None
    ) -> bytes:
        if data is None:
            return b""
        plain = json.loads(json.dumps(data, cls=JSONEncoder))
        return dump_yaml([plain]).encode()
