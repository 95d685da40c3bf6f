"""The NATS protocol operations as small immutable events, one class per operation.

PUB and HPUB are one event (:class:`Pub`), as are MSG and HMSG (:class:`Msg`): ``headers`` set
means the H form. INFO and CONNECT carry typed fields; unknown INFO keys are ignored, as every
client does, so a newer server does not break an older client.
"""

from __future__ import annotations

import json
from typing import Any, final

import attrs

from ._errors import ProtocolError
from ._headers import Headers
from ._limits import DEFAULT_MAX_PAYLOAD_BYTES


@final
@attrs.frozen
class Info:
    """INFO: what the server is and allows (sent first, and again when the cluster changes)."""

    server_id: str = ""
    server_name: str = ""
    version: str = ""
    proto: int = 1
    host: str = ""
    port: int = 0
    headers: bool = True
    max_payload: int = DEFAULT_MAX_PAYLOAD_BYTES
    jetstream: bool = False
    tls_required: bool = False
    tls_available: bool = False
    auth_required: bool = False
    nonce: str | None = None
    client_id: int | None = None
    connect_urls: tuple[str, ...] = ()
    lame_duck_mode: bool = False


@final
@attrs.frozen
class Connect:
    """CONNECT: the client's options and credentials (``password`` is the wire's ``pass``)."""

    verbose: bool = False
    pedantic: bool = False
    tls_required: bool = False
    name: str | None = None
    lang: str = "python-trio"
    version: str = "0.1.0"
    protocol: int = 1
    echo: bool = True
    headers: bool = True
    no_responders: bool = True
    user: str | None = attrs.field(default=None, repr=False)
    password: str | None = attrs.field(default=None, repr=False)
    auth_token: str | None = attrs.field(default=None, repr=False)
    jwt: str | None = attrs.field(default=None, repr=False)
    nkey: str | None = None
    sig: str | None = attrs.field(default=None, repr=False)


@final
@attrs.frozen
class Pub:
    """PUB (``headers is None``) or HPUB: publish ``payload`` on ``subject``."""

    subject: str
    payload: bytes = b""
    reply: str | None = None
    headers: Headers | None = None


@final
@attrs.frozen
class Sub:
    """SUB: deliver messages on ``subject`` (optionally load-balanced in ``queue``) as ``sid``."""

    subject: str
    sid: str
    queue: str | None = None


@final
@attrs.frozen
class Unsub:
    """UNSUB: stop ``sid`` now, or after ``max_msgs`` messages in all."""

    sid: str
    max_msgs: int | None = None


@final
@attrs.frozen
class Msg:
    """MSG (``headers is None``) or HMSG: a message delivered to subscription ``sid``."""

    subject: str
    sid: str
    payload: bytes = b""
    reply: str | None = None
    headers: Headers | None = None

    @property
    def status(self) -> int | None:
        """The status of the header line (503, 408, ...), or ``None``."""
        return None if self.headers is None else self.headers.status


@final
@attrs.frozen
class Ping:
    """PING: either side asks for a PONG."""


@final
@attrs.frozen
class Pong:
    """PONG: the answer to the oldest PING not yet answered."""


@final
@attrs.frozen
class Ok:
    """+OK: acknowledgement in verbose mode."""


@final
@attrs.frozen
class Err:
    """-ERR: the server reports an error (some close the connection, some do not)."""

    message: str


#: Every event the core parses or encodes.
Event = Info | Connect | Pub | Sub | Unsub | Msg | Ping | Pong | Ok | Err

#: Events a client sends; the others come from the server.
CLIENT_EVENTS: tuple[type[Event], ...] = (Connect, Pub, Sub, Unsub, Ping, Pong)
SERVER_EVENTS: tuple[type[Event], ...] = (Info, Msg, Ping, Pong, Ok, Err)

# --- INFO and CONNECT JSON --------------------------------------------------------------------

_INFO_WIRE = {"lame_duck_mode": "ldm"}
_CONNECT_WIRE = {"password": "pass"}


def _json_fields(event: Info | Connect, wire_names: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in attrs.fields(type(event)):
        value = getattr(event, field.name)
        if value is None:
            continue
        out[wire_names.get(field.name, field.name)] = (
            list(value) if isinstance(value, tuple) else value
        )
    return out


def info_json(info: Info) -> bytes:
    """INFO's JSON argument."""
    return json.dumps(_json_fields(info, _INFO_WIRE), separators=(",", ":")).encode()


def connect_json(connect: Connect) -> bytes:
    """CONNECT's JSON argument."""
    return json.dumps(_json_fields(connect, _CONNECT_WIRE), separators=(",", ":")).encode()


def _check_type(op: str, name: str, value: Any, annotation: str) -> Any:
    """Check one JSON value against a field's annotation (as a string: ``from __future__``)."""
    optional = annotation.endswith("| None")
    base = annotation.removesuffix(" | None")
    if value is None:
        if optional:
            return None
        raise ProtocolError(f"{op}: field {name!r} is null")
    if base == "bool":
        ok = isinstance(value, bool)
    elif base == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base == "str":
        ok = isinstance(value, str)
    elif base == "tuple[str, ...]":
        ok = isinstance(value, list) and all(isinstance(item, str) for item in value)
        value = tuple(value) if ok else value
    else:  # pragma: no cover - every field is one of the above
        raise AssertionError(annotation)
    if not ok:
        raise ProtocolError(f"{op}: field {name!r} is not {base}: {value!r:.64}")
    return value


def _from_json(op: str, cls: type[Any], raw: bytes, wire_names: dict[str, str]) -> Any:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{op}: argument is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"{op}: argument is not a JSON object")
    kwargs: dict[str, Any] = {}
    for field in attrs.fields(cls):
        wire = wire_names.get(field.name, field.name)
        if wire in obj:
            kwargs[field.name] = _check_type(op, wire, obj[wire], str(field.type))
    return cls(**kwargs)


def parse_info(raw: bytes) -> Info:
    """INFO's JSON argument as an :class:`Info` (unknown keys ignored)."""
    info: Info = _from_json("INFO", Info, raw, _INFO_WIRE)
    if info.max_payload <= 0:
        raise ProtocolError(f"INFO: field 'max_payload' is not positive: {info.max_payload}")
    return info


def parse_connect(raw: bytes) -> Connect:
    """CONNECT's JSON argument as a :class:`Connect` (unknown keys ignored)."""
    connect: Connect = _from_json("CONNECT", Connect, raw, _CONNECT_WIRE)
    return connect
