"""The OpenAPI schema generator refuses a type it has no JSON Schema for, naming the type and the
field, instead of emitting an empty schema (``{}``, which admits any value) into the document."""

from __future__ import annotations

import datetime
from typing import Any

import attrs
import pytest

from dagnats_trio.api._rest_openapi import ROUTES, openapi_document
from dagnats_trio.api._rest_routedoc import RouteDoc
from dagnats_trio.api._rest_schema import Schemas, UnknownSchemaTypeError
from dagnats_trio.bridge import APPENDABLE, FILLED_FIELDS, MAX_UNTIL_MS
from dagnats_trio.worker import MAX_WAIT_MS


@attrs.frozen
class Stamped:
    """A body with a field the generator does not know."""

    name: str
    when: datetime.datetime


@attrs.frozen
class Outer:
    """A known body holding an unknown one a level down, in a list."""

    items: list[Stamped]


@pytest.mark.parametrize(
    ("tp", "named"),
    [
        (complex, "complex"),
        (datetime.datetime, "datetime"),
        (list, "list"),  # no item type
        (tuple[int, str], "tuple"),  # mixed items
        (dict[int, str], "dict"),  # JSON keys are strings
        (set[str], "set"),
        (bytes, "bytes"),
    ],
)
def test_an_unknown_type_is_an_error_naming_it(tp: Any, named: str) -> None:
    with pytest.raises(UnknownSchemaTypeError) as caught:
        Schemas().of(tp)
    assert named in str(caught.value)
    assert caught.value.tp is tp


def test_the_error_names_the_field_that_holds_the_type() -> None:
    schemas = Schemas()
    with pytest.raises(UnknownSchemaTypeError) as caught:
        schemas.ref(Outer)
    assert caught.value.where == "Stamped.when"
    assert "Stamped.when" in str(caught.value)
    assert "datetime" in str(caught.value)
    assert schemas.components == {}  # no half-made schema is left behind


def test_a_route_with_an_unknown_body_is_refused() -> None:
    route = RouteDoc("POST", "/x", "x", "X.", body=Stamped)
    schemas = Schemas()
    with pytest.raises(UnknownSchemaTypeError, match=r"Stamped\.when"):
        schemas.ref(route.body)
    with pytest.raises(UnknownSchemaTypeError, match="not an attrs class"):
        schemas.ref(dict)


def test_known_types_have_their_schemas() -> None:
    schemas = Schemas()
    assert schemas.of(str) == {"type": "string"}
    assert schemas.of(int | None) == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert schemas.of(tuple[str, ...]) == {"type": "array", "items": {"type": "string"}}
    assert schemas.of(dict[str, Any]) == {
        "type": "object",
        "additionalProperties": {"description": "any JSON value"},
    }


def _schemas_in(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if "schema" in node and isinstance(node["schema"], dict):
            found.append(node["schema"])
        for value in node.values():
            found.extend(_schemas_in(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_schemas_in(value))
    return found


def test_the_document_has_no_empty_schema() -> None:
    doc = openapi_document()
    components = doc["components"]["schemas"]
    assert len(components) > 20
    for name, schema in components.items():
        assert schema, name
        for field, prop in schema.get("properties", {}).items():
            assert prop, f"{name}.{field}"
    for schema in _schemas_in(doc["paths"]):
        assert schema
    assert len(ROUTES) == 28


def test_every_path_parameter_is_a_non_empty_string() -> None:
    # An empty one is a path of no route (``/runs/``): a client generated from the document
    # must never be led to send it.
    doc = openapi_document()
    seen = 0
    for ops in doc["paths"].values():
        for op in ops.values():
            for param in op.get("parameters", []):
                if param["in"] == "path":
                    seen += 1
                    assert param["required"] is True, param
                    assert param["schema"] == {"type": "string", "minLength": 1}, param
    assert seen >= 10


def test_bridge_bodies_state_the_bounds_their_routes_check() -> None:
    # The routes answer 400 to a blank failure reason and to a wait out of range; the document
    # says so, so a generated client or a fuzzer keeps to what is accepted.
    components = openapi_document()["components"]["schemas"]
    error = components["FailBody"]["properties"]["error"]
    assert error == {"type": "string", "minLength": 1, "pattern": r"\S"}
    duration = components["PauseBody"]["properties"]["duration_ms"]
    assert duration == {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS}
    delay = components["ContinueBody"]["properties"]["delay_ms"]
    assert delay["minimum"] == 0 and delay["maximum"] == MAX_WAIT_MS
    until = components["ContinueBody"]["properties"]["until_ms"]
    assert until["minimum"] == 0 and until["maximum"] == MAX_UNTIL_MS
    # An unbounded field keeps its plain schema.
    assert components["FailBody"]["properties"]["retriable"] == {"type": "boolean"}


def test_the_journal_append_body_lists_every_field_a_record_kind_takes() -> None:
    # A 400 of journal/append names the record's field (``call``, ``response``, ...): the
    # document lists each one, no more, so a client and a fuzzer know what it may send.
    components = openapi_document()["components"]["schemas"]
    listed = set(components["JournalAppendBody"]["properties"])
    takes = {f.name for cls in APPENDABLE.values() for f in attrs.fields(cls)}
    assert listed == {"type"} | (takes - set(FILLED_FIELDS))
    assert components["JournalAppendBody"]["required"] == ["type"]


def test_the_appendable_kinds_cannot_be_changed_by_a_caller() -> None:
    """The table is exported: a caller adding a kind would change every bridge's refusals."""
    with pytest.raises(TypeError):
        APPENDABLE["claim"] = object  # type: ignore[index]
    assert "claim" not in APPENDABLE and "tool.intent" in APPENDABLE
