"""One cattrs converter for every wire shape, and a decoder that never crashes its reader."""

from __future__ import annotations

import enum
import json
import operator
import types
import typing
from collections.abc import Callable
from typing import Any, Final, TypeVar, final

import attrs
import cattrs
from cattrs.fns import identity
from cattrs.gen import make_dict_structure_fn
from cattrs.strategies import configure_tagged_union

T = TypeVar("T")

#: A JSON value as Python holds it (dict, list, str, int, float, bool, None).
JsonValue = Any

TAG_FIELD = "type"


@final
class DecodeError(ValueError):
    """A message on the wire is not valid JSON or not the expected shape."""


# Each scalar hook tests the exact type first (what ``json`` decodes to: no built-in call), the
# isinstance rules only for anything else (a subclass), so the answer is the same.


def _strict_str(value: Any, _: Any) -> str:
    if type(value) is not str and not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _strict_int(value: Any, _: Any) -> int:
    if type(value) is not int and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _strict_float(value: Any, _: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)


def _strict_bool(value: Any, _: Any) -> bool:
    if value is not True and value is not False:  # bool has no subclasses
        raise TypeError(f"expected true or false, got {type(value).__name__}")
    return value


def _make_converter() -> cattrs.Converter:
    """Strict on scalars: a wire value of the wrong JSON type is an error, never coerced (cattrs
    would otherwise turn ``"false"`` into ``True`` and ``5`` into ``"5"``)."""
    conv = cattrs.Converter(omit_if_default=False, forbid_extra_keys=False)
    conv.register_structure_hook(str, _strict_str)
    conv.register_structure_hook(int, _strict_int)
    conv.register_structure_hook(float, _strict_float)
    conv.register_structure_hook(bool, _strict_bool)
    conv.register_structure_hook_func(
        lambda cls: attrs.has(cls),
        _require_object(conv),
    )
    # A field typed ``JsonValue`` (``Any``) holds a JSON value: handed on as it is, where cattrs
    # would dispatch on the runtime type of it and of every element inside it. ``to_json``
    # unstructures anything else such a field may hold (see ``_plain``). cattrs' own
    # ``identity`` is what its generated functions recognise and inline (a plain attribute read,
    # no call per field); so is an optional scalar (``int | None``...), whose value is JSON as it
    # is, where cattrs would call its optional wrapper and then the scalar's identity.
    conv.register_unstructure_hook_func(lambda t: t is Any, identity)
    conv.register_unstructure_hook_func(lambda t: _optional_scalar(t) is not None, identity)
    # Structuring an optional scalar: the strict scalar hook called directly, where cattrs'
    # optional wrapper dispatches on the inner type on every call.
    conv.register_structure_hook_factory(
        lambda t: _optional_scalar(t) is not None, _optional_scalar_structure
    )
    # Any other optional (``DispatchId | None``, ``Wait | None``...): its inner hook looked up
    # once, here, where cattrs' own optional hook dispatches on the inner type on every call.
    conv.register_structure_hook_factory(
        lambda t: _optional_other(t) is not None,
        lambda t: _optional_structure(t, conv),
    )
    # An enum (of plain values, cattrs' own case) by its value: cattrs' hooks are a lambda
    # reading the ``value`` property (two Python calls), and a lambda calling the class (three:
    # the lambda, ``EnumType.__call__``, ``Enum.__new__``).
    conv.register_unstructure_hook_factory(_plain_enum, lambda _: _ENUM_VALUE)
    conv.register_structure_hook_factory(_plain_enum, _enum_structure)
    return conv


#: An enum member's value, read in C (``Enum.value`` is a property returning ``_value_``).
_ENUM_VALUE: Final = operator.attrgetter("_value_")


def _plain_enum(t: Any) -> bool:
    """An enum whose values are stored as they are (cattrs' test: no ``_value_`` annotation)."""
    return (
        isinstance(t, type)
        and issubclass(t, enum.Enum)
        and "_value_" not in getattr(t, "__annotations__", {})
    )


def _enum_structure(cls: Any) -> Callable[[Any, Any], Any]:
    try:
        by_value = {member.value: member for member in cls}
    except TypeError:  # an unhashable value: every lookup is the enum's own
        by_value = {}

    def structure(value: Any, _: Any) -> Any:
        try:
            return by_value[value]
        except (KeyError, TypeError):
            return cls(value)  # not a member's value: the enum's own answer, or its error

    return structure


_SCALARS: dict[Any, Callable[[Any, Any], Any]] = {
    str: _strict_str,
    int: _strict_int,
    float: _strict_float,
    bool: _strict_bool,
}


def _optional_scalar(t: Any) -> Any:
    """``X`` when ``t`` is ``X | None`` (either order) for a JSON scalar ``X``, else None."""
    if typing.get_origin(t) not in (typing.Union, types.UnionType):
        return None
    args = typing.get_args(t)
    if len(args) != 2 or type(None) not in args:
        return None
    inner = args[0] if args[1] is type(None) else args[1]
    return inner if inner in _SCALARS else None


def _optional_other(t: Any) -> Any:
    """``X`` when ``t`` is ``X | None`` (either order) for an ``X`` that is not a JSON scalar
    (an attrs class, a list...), else None."""
    if typing.get_origin(t) not in (typing.Union, types.UnionType):
        return None
    args = typing.get_args(t)
    if len(args) != 2 or type(None) not in args:
        return None
    inner = args[0] if args[1] is type(None) else args[1]
    return None if inner in _SCALARS else inner


def _optional_structure(t: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    """cattrs' answer for ``X | None`` (None as it is, else ``X``'s hook), that hook bound once.

    Bound when the hook is first asked for, which is when the hook of a class with such a
    field is generated: on the first decode of that class (``_require_object``), after every
    module has registered its hooks at import."""
    inner = _optional_other(t)
    hook = conv.get_structure_hook(inner)

    def structure(value: Any, _: Any, _hook: Any = hook, _inner: Any = inner) -> Any:
        return None if value is None else _hook(value, _inner)

    return structure


def _optional_scalar_structure(t: Any) -> Callable[[Any, Any], Any]:
    inner = _optional_scalar(t)
    strict = _SCALARS[inner]

    def structure(value: Any, cls: Any, _exact: Any = inner) -> Any:
        # None, or the exact JSON type (what ``json`` decodes to), is the answer the strict
        # hook would give (it returns such a value as it is): no call. The rest: the hook.
        if value is None or type(value) is _exact:
            return value
        return strict(value, cls)

    return structure


def _require_object(conv: cattrs.Converter) -> Any:
    """Wrap cattrs' attrs-class hook so a non-object (a string, a list) is rejected."""

    generated: dict[Any, Any] = {}

    def hook(value: Any, cls: Any) -> Any:
        if type(value) is not dict and not isinstance(value, dict):
            got = type(value).__name__
            raise TypeError(f"expected a JSON object for {cls.__name__}, got {got}")
        try:
            fn = generated[cls]  # a subscript, not a get() call: this runs per object decoded
        except KeyError:
            fn = generated[cls] = make_dict_structure_fn(cls, conv)
        return fn(value, cls)

    return hook


converter = _make_converter()

#: ``json.dumps`` with non-default options builds a new encoder on every call; this one is
#: built once (the encoder keeps no state between calls). Values from outside pass
#: :mod:`.json_policy` before they get here; the encoder itself still writes a ``NaN`` read back
#: from a record stored by an older release, so such a run can still be cancelled and purged
#: (with ``allow_nan=False`` its every event failed and it was stuck; docs/upgrading.md).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
#: :data:`_ENCODER` without its circular-reference check, the one :func:`dumps_json` tries
#: first: that check keeps a dict of the ids of the containers being written, an insert and a
#: delete per dict and list of every record, event and task, and only tells a cycle apart from
#: nesting too deep (both end the write). Values here are acyclic: the converter's output, and
#: JSON values that passed :mod:`.json_policy` (nesting bounded, so no cycle). A value that is
#: not (a cycle, or nesting past the interpreter's recursion limit) raises ``RecursionError``
#: here, and is then written by :data:`_ENCODER`, which answers it as it always did.
_ENCODER_UNCHECKED = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, check_circular=False
)

#: ``json.loads``' own decoder (the module's default one), called without its wrapper.
_DECODER = json.JSONDecoder()


def loads_json(data: bytes) -> Any:
    """``json.loads(data)``, the same answer and errors, cheaper for what the wire carries (an
    object in UTF-8): ``json.loads`` first sniffs the bytes' encoding, a per-call cost on every
    JetStream answer and record. Bytes that may be in another encoding go to ``json.loads``."""
    # ``{`` then a non-zero byte is UTF-8 by json's own sniffing (a BOM or UTF-16/32 differ).
    if data[:1] == b"{" and data[1:2] not in (b"", b"\x00"):
        # The text starts with ``{``: no leading whitespace for ``decode`` to skip, so the
        # documented ``raw_decode`` reads it (its errors are ``decode``'s); anything after the
        # value goes to ``decode``, which allows whitespace only and raises "Extra data" else.
        text = data.decode("utf-8", "surrogatepass")
        value, end = _DECODER.raw_decode(text)
        if end != len(text):
            return _DECODER.decode(text)
        return value
    return json.loads(data)


def _tag_of(cls: Any) -> str:
    return str(getattr(cls, "TYPE"))  # noqa: B009


def register_union(union: Any) -> None:
    """Tag every member of ``union`` by its ``TYPE`` class attribute, under the key ``type``.

    cattrs' tagged-union hooks, then the same hooks without their wrapper per member (cattrs
    calls a ``*_union_member`` function that only calls the member's own hook): the member's
    hook is called directly, one Python call less per record, event or effect encoded or
    decoded. The answers, errors and key order are cattrs' (the tag is written last)."""
    configure_tagged_union(union, converter, tag_generator=_tag_of, tag_name=TAG_FIELD)
    members = typing.get_args(union)
    unstructure_hooks = {cl: converter.get_unstructure_hook(cl) for cl in members}
    tags = {cl: _tag_of(cl) for cl in members}
    structure_hooks = {_tag_of(cl): (converter.get_structure_hook(cl), cl) for cl in members}

    def unstructure_tagged_union(
        val: Any, _hooks: Any = unstructure_hooks, _tags: Any = tags, _tag: str = TAG_FIELD
    ) -> dict[str, Any]:
        res: dict[str, Any] = _hooks[val.__class__](val)
        res[_tag] = _tags[val.__class__]
        return res

    def structure_tagged_union(
        val: Any, _: Any, _hooks: Any = structure_hooks, _tag: str = TAG_FIELD
    ) -> Any:
        hook, cl = _hooks[val[_tag]]
        return hook(val, cl)

    converter.register_unstructure_hook(union, unstructure_tagged_union)
    converter.register_structure_hook(union, structure_tagged_union)


def to_json(value: Any, cls: Any = None) -> bytes:
    """Encode an attrs instance (or union member, when ``cls`` names the union) as JSON bytes."""
    raw = (
        converter.unstructure(value, unstructure_as=cls)
        if cls is not None
        else (converter.unstructure(value))
    )
    return dumps_json(raw).encode()


def encoder_of(cls: Any) -> Callable[[Any], bytes]:
    """:func:`to_json` for values of ``cls`` (an attrs class, or a union registered with
    :func:`register_union`), with the converter's hook for ``cls`` looked up once, here, rather
    than dispatched on every call (a record, an event, a task is encoded per message). Call it
    after every hook ``cls`` needs is registered (at import, below the union's registration):
    the hook is fixed then. The same bytes as ``to_json(value, cls)``."""
    hook = converter.get_unstructure_hook(cls)

    def encode(value: Any, _hook: Callable[[Any], Any] = hook) -> bytes:
        return dumps_json(_hook(value)).encode()

    return encode


def dumps_json(raw: Any) -> str:
    """The compact JSON text of an unstructured value (what :func:`to_json` encodes), for a
    caller that puts stored JSON texts together itself."""
    try:
        return _ENCODER_UNCHECKED.encode(raw)
    except (TypeError, RecursionError):
        # Not plain JSON, a cycle, or nested too deep: the encoder that checks for cycles
        # says which (the same text, or the same error, as before the unchecked one).
        return _dumps_checked(raw)


def _dumps_checked(raw: Any) -> str:
    """:func:`dumps_json` by the encoder that checks for cycles (``Circular reference
    detected``), then, for a value that is not plain JSON, by its parts' own types."""
    try:
        return _ENCODER.encode(raw)
    except TypeError:
        # A ``JsonValue`` field held something that is not plain JSON (an attrs instance, an
        # enum): unstructured by its own type, as cattrs did before the field was handed on.
        return _ENCODER.encode(_plain(raw))


def _plain(value: Any) -> Any:
    """``value`` with every part that is not plain JSON unstructured by its runtime type."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    unstructured = converter.unstructure(value)
    return value if unstructured is value else _plain(unstructured)


def from_json(data: bytes | str, cls: type[T] | Any, what: str | None = None) -> T:
    """Decode ``data`` as ``cls``; any problem becomes a readable :class:`DecodeError`."""
    try:
        raw = (
            loads_json(data) if type(data) is bytes or isinstance(data, bytes) else json.loads(data)
        )
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"not valid JSON: {exc}") from None
    except RecursionError:
        # json's parser recurses per level: nesting past the interpreter's recursion limit is
        # refused like any unreadable message, so one bad message cannot crash its reader.
        raise DecodeError("JSON nested too deep to read") from None
    result: T = from_obj(raw, cls, what)
    return result


def from_obj(raw: Any, cls: type[T] | Any, what: str | None = None) -> T:
    """Structure an already-parsed JSON value as ``cls``; problems become :class:`DecodeError`."""
    if type(raw) is not dict and not isinstance(raw, dict) and _is_object_shape(cls):
        got = type(raw).__name__
        raise DecodeError(f"not a valid {what or _name(cls)}: expected a JSON object, got {got}")
    try:
        return converter.structure(raw, cls)  # type: ignore[no-any-return]
    except Exception as exc:  # cattrs raises ClassValidationError, KeyError, TypeError, ...
        raise DecodeError(f"not a valid {what or _name(cls)}: {_describe(exc)}") from None


def _is_object_shape(cls: Any) -> bool:
    """An attrs class, or a union of them (a tagged union): both need a JSON object.

    Worked out on each call, not cached: any caller's type may be asked about (the types are
    not known at import), and it is asked only of a value that is not a JSON object (a
    malformed message, or a value decoded as ``Any``), never on a well-formed message's path."""
    if typing.get_origin(cls) in (typing.Union, types.UnionType):
        return all(attrs.has(m) for m in typing.get_args(cls))
    return attrs.has(cls)


def _name(cls: Any) -> str:
    return getattr(cls, "__name__", None) or str(cls)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.ClassValidationError | cattrs.IterableValidationError):
        parts = cattrs.transform_error(exc)
        return "; ".join(parts)
    if isinstance(exc, KeyError):
        return f"missing or unknown {exc}"
    return str(exc) or type(exc).__name__
