"""The JSON protocol: exactly the paper's five fields, checked against a JSON Schema.

A protocol that fails the schema (missing field, wrong type, plan not a list, unknown task type)
is rejected with a readable reason and never reaches training.
"""
from __future__ import annotations

import json
import re

from jsonschema import Draft202012Validator

TASK_TYPES = ("single_hop", "multi_hop_bridge", "comparison", "multi_hop_compositional")

PROTOCOL_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "MAPD search protocol",
    "type": "object",
    "additionalProperties": False,
    "required": ["task_type", "plan", "grounding_facts", "partial_findings", "answer_verified"],
    "properties": {
        "task_type": {"enum": list(TASK_TYPES)},
        "plan": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "grounding_facts": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "partial_findings": {"type": "array", "items": {"type": "string"}},
        "answer_verified": {"type": "boolean"},
    },
}
_VALIDATOR = Draft202012Validator(PROTOCOL_SCHEMA)


class ProtocolError(ValueError):
    """A protocol that does not satisfy the schema."""


def protocol_errors(protocol: object) -> list[str]:
    """Every schema violation as ``<field path>: <message>`` (empty list = valid)."""
    errs = sorted(_VALIDATOR.iter_errors(protocol), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errs]


def parse_protocol(text: str) -> dict:
    """Parse and validate protocol JSON text; raise :class:`ProtocolError` with the reason."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"not JSON: {e}") from None
    errs = protocol_errors(obj)
    if errs:
        raise ProtocolError("; ".join(errs))
    return obj


def protocol_to_context(protocol: dict) -> str:
    """The words the privileged branch reads: the protocol's content without JSON punctuation."""
    parts = ["[proto]", "type", protocol["task_type"], "plan", " ; ".join(protocol["plan"]),
             "facts", " ; ".join(protocol["grounding_facts"]) or "none",
             "partial", " ; ".join(protocol["partial_findings"]) or "none",
             "verified", "yes" if protocol["answer_verified"] else "no", "[/proto]"]
    return " ".join(parts)


def reason_kind(reason: str) -> str:
    """A rejection reason with long quoted values elided, so equal kinds of error count together."""
    reason = re.sub(r"^([^:]+: )'[^']*'", r"\1'…'", reason)  # the offending value itself
    return re.sub(r"'[^']{20,}'", "'…'", reason)
