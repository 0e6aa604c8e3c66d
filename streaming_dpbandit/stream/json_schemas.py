"""JSON Schemas of every message the service reads or writes, generated from its pydantic models.

The models are the one definition of each message (``stream/schemas.py``; the ``privacy:
local`` messages in ``stream/local/schemas.py``; the broadcast's released model in
``stream/scaling/models_topic.py``); :data:`MESSAGES` names them, and :func:`json_schema`
turns one into a JSON Schema (draft 2020-12). The generated files ship in the package
(``streaming_dpbandit/data/schemas/``) and in ``docs/schemas/``; ``dpbandit schema NAME``
prints one, ``dpbandit schema --write DIR`` writes them all, and
``tests/stream/test_json_schemas.py`` checks that both copies are what the models generate, and
validates against them every example of ``docs/events.md``, every message the load generator
sends and every message a service run writes.

A schema checks structure, types and bounds. A few rules span fields and are checked by the
service only (for a context: exactly one form of features, unique arm ids, every arm with the
same number of features; base64 that decodes to whole float64 values). Binary contexts (DPBC,
``docs/events.md``) are not JSON and have no schema.

Examples
--------
>>> schema = json_schema("watermark")
>>> schema["properties"]["type"], schema["additionalProperties"], schema["x-topic"]
({'const': 'watermark', 'title': 'Type', 'type': 'string'}, False, 'feedback')
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .local.schemas import LDPModelMessage, LDPReportMessage
from .scaling.models_topic import ModelMessage
from .schemas import (
    ContextEvent,
    DeadLetter,
    Decision,
    Feedback,
    SlateDecision,
    SlateFeedback,
    Watermark,
)

__all__ = ["DIALECT", "MESSAGES", "Message", "json_schema", "schema_text", "write_schemas"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"


@dataclasses.dataclass(frozen=True)
class Message:
    """One kind of message: its pydantic model, the topic (``topics.<key>``) it travels on and
    whether the service reads or writes it."""

    model: type[BaseModel]
    topic: str
    direction: str  # "in" (the service reads it) or "out" (it writes it)


#: Every message kind, by the name ``dpbandit schema NAME`` takes.
MESSAGES: dict[str, Message] = {
    "context": Message(ContextEvent, "contexts", "in"),
    "feedback": Message(Feedback, "feedback", "in"),
    "watermark": Message(Watermark, "feedback", "in"),
    "slate-feedback": Message(SlateFeedback, "feedback", "in"),
    "ldp-report": Message(LDPReportMessage, "feedback", "in"),
    "decision": Message(Decision, "decisions", "out"),
    "slate-decision": Message(SlateDecision, "decisions", "out"),
    "dead-letter": Message(DeadLetter, "dead_letter", "out"),
    "ldp-model": Message(LDPModelMessage, "models", "out"),
    "model": Message(ModelMessage, "broadcast.models_topic", "out"),
}

_SECTIONS = re.compile(r"\n\s*(>>>|Examples\n|Parameters\n|Notes\n)")


def _summary(text: str) -> str:
    """A docstring without its examples and numpydoc sections, on one line per paragraph."""
    text = _SECTIONS.split(text, maxsplit=1)[0].strip()
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n") if p.strip())


def _tidy(node: Any) -> None:
    """Docstring descriptions of models (pydantic copies them whole) cut to their prose."""
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            node["description"] = _summary(node["description"])
        for v in node.values():
            _tidy(v)
    elif isinstance(node, list):
        for v in node:
            _tidy(v)


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of message kind ``name`` (a key of :data:`MESSAGES`)."""
    msg = MESSAGES[name]
    body = msg.model.model_json_schema(mode="validation")
    _tidy(body)
    return {
        "$schema": DIALECT,
        "$id": f"urn:streaming-dpbandit:schema:v1:{name}",
        **body,
        "x-topic": msg.topic,
        "x-direction": msg.direction,
    }


def schema_text(name: str) -> str:
    """:func:`json_schema` as the text of its file (sorted keys, two-space indent)."""
    return json.dumps(json_schema(name), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schemas(directory: str | Path) -> list[Path]:
    """Write ``<name>.schema.json`` for every message kind into ``directory``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in MESSAGES:
        path = out / f"{name}.schema.json"
        path.write_text(schema_text(name), encoding="utf-8")
        written.append(path)
    return written
