"""Bounds a request field states for the OpenAPI document, beside the check that enforces them.

A route refuses an empty failure reason or an out-of-range duration with a 400; written as field
metadata, the same bound reaches the generated schema (``api._rest_schema``), so a client
generated from the document, or a fuzzer, does not send what the route refuses. Pure data.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SCHEMA_METADATA_KEY", "int_range", "non_empty"]

#: The attrs field metadata key whose dict is merged into the field's generated schema.
SCHEMA_METADATA_KEY = "json_schema"


def non_empty() -> dict[str, Any]:
    """Metadata for a string field that must hold at least one character that is not a space."""
    return {SCHEMA_METADATA_KEY: {"minLength": 1, "pattern": r"\S"}}


def int_range(low: int, high: int) -> dict[str, Any]:
    """Metadata for an integer field from ``low`` to ``high``, both included."""
    return {SCHEMA_METADATA_KEY: {"minimum": low, "maximum": high}}
