"""JSON Schemas for the OpenAPI document, generated from the attrs classes the handlers decode and
encode, so the document describes what the code does.

A field may narrow its schema through its metadata (``protocol.schema_hints``: a string that
must not be blank, an integer's range), so the document states the bounds the route checks.

A type the generator does not know is an error (:class:`UnknownSchemaTypeError`, naming the type
and the field that holds it), never an empty schema that would let any value through the
document unnoticed.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any, Union, final

import attrs

from ..protocol.schema_hints import SCHEMA_METADATA_KEY


@final
class UnknownSchemaTypeError(TypeError):
    """A route's body (or a class it holds) has a field of a type with no JSON Schema here."""

    def __init__(self, tp: object, where: str) -> None:
        super().__init__(
            f"no OpenAPI schema for type {tp!r} at {where}: give the field a JSON type "
            "(str, int, float, bool, None, an enum, a list, a dict of str, an attrs class) "
            "or teach dagnats_trio.api._rest_schema.Schemas.of about it"
        )
        self.tp = tp
        self.where = where


@final
class Schemas:
    """The document's ``components.schemas``, filled as routes refer to attrs classes."""

    def __init__(self) -> None:
        self.components: dict[str, dict[str, Any]] = {}

    def ref(self, cls: Any) -> dict[str, Any]:
        """A ``$ref`` to ``cls``'s schema, generating it (and those it refers to) once."""
        if not attrs.has(cls):
            raise UnknownSchemaTypeError(cls, "a route's body (not an attrs class)")
        name = cls.__name__
        if name not in self.components:
            self.components[name] = {}  # placeholder: breaks recursion
            try:
                self.components[name] = self._object(cls)
            except BaseException:
                del self.components[name]
                raise
        return {"$ref": f"#/components/schemas/{name}"}

    def _object(self, cls: Any) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        props: dict[str, Any] = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            props[field.name] = self.of(hints[field.name], where=f"{cls.__name__}.{field.name}")
            props[field.name].update(field.metadata.get(SCHEMA_METADATA_KEY, {}))
            if field.default is attrs.NOTHING:
                required.append(field.name)
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        doc = (cls.__doc__ or "").strip()
        if doc and not doc.startswith(f"{cls.__name__}("):
            schema["description"] = " ".join(doc.split()).replace("``", "`")
        return schema

    def of(self, tp: Any, *, where: str = "the top level") -> dict[str, Any]:
        """The schema of a type hint; :class:`UnknownSchemaTypeError` for one it does not know."""
        if tp is Any:
            return {"description": "any JSON value"}
        if tp is type(None):
            return {"type": "null"}
        origin = typing.get_origin(tp)
        if origin is Union or isinstance(tp, types.UnionType):
            return {"anyOf": [self.of(a, where=where) for a in typing.get_args(tp)]}
        if tp is str:
            return {"type": "string"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return {"type": "string", "enum": [m.value for m in tp]}
        if origin in (list, tuple):
            args = [a for a in typing.get_args(tp) if a is not Ellipsis]
            if len(set(args)) != 1:
                raise UnknownSchemaTypeError(tp, where)  # bare, empty or mixed: no one item type
            return {"type": "array", "items": self.of(args[0], where=f"{where}[]")}
        if origin is dict:
            key, value = typing.get_args(tp)
            if key is not str:
                raise UnknownSchemaTypeError(tp, where)  # JSON object keys are strings
            return {
                "type": "object",
                "additionalProperties": self.of(value, where=f"{where}{{}}"),
            }
        if attrs.has(tp):
            return self.ref(tp)
        raise UnknownSchemaTypeError(tp, where)
