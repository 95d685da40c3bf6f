"""The JetStream API's conventions, as pure functions: what both NATS transports agree on.

Header names, err_codes and the errors they map to, name and key rules, the parse of a
message-get answer and of a plain publish ack, the KV conventions (subjects, delete markers,
TTLs) and the configs of the runtime's streams and buckets. No I/O here: the requests that use
them are :class:`~dagnats_trio.transport._jetstream.JetStreamOverRequests`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any, Final

from ._errors import (
    NotFound,
    NotProvisioned,
    TemporarilyUnavailable,
    TransportError,
    TransportTimeout,
    WrongLastSequence,
)
from ._values import BucketSpec, StoredMsg, StreamSpec, check_msg_ttl

#: Duplicate window of a KV bucket's stream without a TTL (nats-py's and the server's default).
KV_DUPLICATE_WINDOW_S = 120.0

EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
MSG_ID = "Nats-Msg-Id"
KV_OP = "KV-Operation"
MSG_TTL = "Nats-TTL"
KV_MARKER_REASON = "Nats-Marker-Reason"
KV_DELETE_OPS = frozenset({"DEL", "PURGE"})

# nats-server JetStream err_codes the transports act on.
ERR_WRONG_LAST_SEQ = frozenset({10071, 10164})
ERR_STREAM_NOT_FOUND = 10059
ERR_CONSUMER_NOT_FOUND = 10014
ERR_NO_MESSAGE = 10037
ERR_STREAM_NAME_IN_USE = 10058
#: A stream config's ``retention`` that removes a message once it is acked.
WORK_QUEUE_RETENTION = "workqueue"

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}\Z")
_KV_KEY = re.compile(r"^[-/_=.A-Za-z0-9]+\Z")
#: A publish ack as nats-server spells one (stream, an optional domain, seq, an optional
#: duplicate flag, which the server writes ``"duplicate": true``, with a space; nothing else):
#: the sequence is read without a JSON parse, on every append. Any other answer (an error, a
#: field this does not know) goes through the JSON decoder.
_PLAIN_PUB_ACK = re.compile(
    rb'\{"stream":"[^"\\\x00-\x1f]*",(?:"domain":"[^"\\\x00-\x1f]*",)?'
    rb'"seq":(0|[1-9][0-9]{0,18})(?:,"duplicate": ?true)?\}'
)


def check_name(kind: str, value: str) -> str:
    """``value`` when it is a valid stream, consumer or bucket name; else ValueError."""
    if not _NAME.match(value):
        raise ValueError(f"{kind} {value!r} must be letters, digits, '_' or '-'")
    return value


def check_key(key: str) -> str:
    """``key`` when it is a valid KV key; else ValueError."""
    if not _KV_KEY.match(key) or key.startswith(".") or key.endswith("."):
        raise ValueError(
            f"key {key!r} must be letters, digits and '-/_=.', not starting or ending with '.'"
        )
    return key


def ns(seconds: float) -> int:
    """Seconds as the nanoseconds JetStream's API speaks."""
    return int(seconds * 1_000_000_000)


#: Taken off a pull request's ``expires`` so the server ends it before the fetch's (or the
#: worker's) own wait does (nats-py does the same).
PULL_EXPIRES_MARGIN_NS: Final = 100_000
#: How long a fetch waits past its own timeout for the server's end-of-request status.
FETCH_GRACE_S: Final = 1.0


def plain_pub_ack_seq(answer: bytes) -> int | None:
    """The sequence of a plain publish ack (what ``json.loads(answer)["seq"]`` says), or None
    for any other answer, which the caller parses as JSON (an error, a field this does not
    know)."""
    match = _PLAIN_PUB_ACK.fullmatch(answer)
    return int(match[1]) if match is not None else None


# --- errors ----------------------------------------------------------------------------------


class NoResponders(TemporarilyUnavailable):
    """Nobody answered; for a publish this may also mean no stream owns the subject."""


class StreamNameInUse(TransportError):
    """A create met an existing stream with another config: update it instead."""


def api_error(code: Any, err_code: Any, description: Any, what: str) -> TransportError:
    """The interface's error for a JetStream API error (or a pull request's status)."""
    text = f"{what}: {description} (code {code}, err_code {err_code})"
    if err_code in ERR_WRONG_LAST_SEQ:
        return WrongLastSequence(text)
    if err_code in (ERR_STREAM_NOT_FOUND, ERR_CONSUMER_NOT_FOUND):
        return NotProvisioned(text)
    if err_code == ERR_NO_MESSAGE:
        return NotFound(text)
    if err_code == ERR_STREAM_NAME_IN_USE:
        return StreamNameInUse(text)
    if code == 503:
        return TemporarilyUnavailable(text)
    if code == 408:
        return TransportTimeout(text)
    return TransportError(text)


#: Pull request ends that are no error: no messages (404), expired or requests pending (408).
PULL_QUIET_ENDS: Final = frozenset({404, 408})
#: 409s that end a pull request for the server's own reasons, not the request's (what nats.go's
#: ``Consume`` asks again after). Other 409s (a limit of the consumer's exceeded, the consumer
#: deleted) would come back on every request.
PULL_ASK_AGAIN_409: Final = frozenset({"leadership change", "server shutdown"})
#: A status the server sends unasked on an idle pull request (heartbeats are not asked for).
PULL_IDLE_HEARTBEAT: Final = 100


def pull_end_error(status: int, description: str, what: str) -> TransportError | None:
    """The error a pull request's end stands for; None for an end after which a standing
    request is simply asked again (:data:`PULL_QUIET_ENDS`, :data:`PULL_ASK_AGAIN_409`)."""
    if status in PULL_QUIET_ENDS:
        return None
    if status == 409 and description.lower() in PULL_ASK_AGAIN_409:
        return None
    return api_error(status, None, description, what)


def json_error(err: Mapping[str, Any], what: str) -> TransportError:
    """:func:`api_error` for the ``error`` object of a JSON answer."""
    return api_error(err.get("code"), err.get("err_code"), err.get("description"), what)


# --- messages and KV conventions (pure) ------------------------------------------------------


def parse_header_block(raw: bytes) -> dict[str, str]:
    """The fields of a ``NATS/1.0`` header block (as the message-get API returns it)."""
    headers: dict[str, str] = {}
    for line in raw.split(b"\r\n")[1:]:
        if not line:
            continue
        name, _, value = line.partition(b":")
        headers[name.decode().strip()] = value.decode().strip()
    return headers


def stored_from_api(message: Mapping[str, Any]) -> StoredMsg:
    """A message-get answer's ``message`` as a :class:`StoredMsg`."""
    hdrs = message.get("hdrs")
    data = message.get("data")
    return StoredMsg(
        subject=message["subject"],
        seq=int(message["seq"]),
        data=base64.b64decode(data) if data else b"",
        headers=parse_header_block(base64.b64decode(hdrs)) if hdrs else {},
    )


def is_delete_marker(headers: Mapping[str, str]) -> bool:
    """A KV delete or purge, or a marker the server left (TTL expiry)."""
    return headers.get(KV_OP) in KV_DELETE_OPS or KV_MARKER_REASON in headers


def with_ttl(hdrs: dict[str, str], ttl_s: float | None) -> dict[str, str]:
    """``hdrs`` plus the per-message TTL header when ``ttl_s`` is given."""
    if ttl_s is not None:
        hdrs[MSG_TTL] = f"{check_msg_ttl(ttl_s)}s"
    return hdrs


def kv_stream(bucket: str) -> str:
    return f"KV_{check_name('bucket', bucket)}"


def kv_prefix(bucket: str) -> str:
    return f"$KV.{bucket}."


def watch_filter(bucket: str, prefix: str) -> str:
    """The narrowest subject filter for ``prefix``: whole tokens go to the server."""
    base = kv_prefix(bucket)
    if prefix.endswith(".") and _KV_KEY.match(prefix) and not prefix.startswith("."):
        return f"{base}{prefix}>"
    return f"{base}>"


def stream_config(spec: StreamSpec, replicas: int) -> dict[str, Any]:
    """The JetStream config of one of the runtime's streams."""
    window = spec.duplicate_window_s
    if spec.max_age_s > 0:
        window = min(window, spec.max_age_s)
    config: dict[str, Any] = {
        "name": check_name("stream", spec.name),
        "subjects": list(spec.subjects),
        "retention": WORK_QUEUE_RETENTION if spec.work_queue else "limits",
        "max_age": ns(spec.max_age_s),
        "duplicate_window": ns(window),
        "num_replicas": replicas,
        "storage": "file",
        "discard": "old",
        "allow_direct": True,
    }
    if spec.allow_atomic:
        config["allow_atomic"] = True  # only when asked: servers before 2.12 do not know it
    return config


def keep_work_queue_retention(
    config: Mapping[str, Any], existing: Mapping[str, Any]
) -> dict[str, Any]:
    """``config`` for the update of a stream that exists with ``existing`` (its config):
    nats-server refuses to change a retention to or from a work queue, so the stream keeps its
    own there; everything else is updated."""
    old, new = existing.get("retention"), config["retention"]
    if old != new and WORK_QUEUE_RETENTION in (old, new):
        return {**config, "retention": old}
    return dict(config)


def bucket_config(spec: BucketSpec, replicas: int) -> dict[str, Any]:
    """The stream config of a KV bucket (the KV conventions nats-py and the server use)."""
    ttl_s = spec.ttl_s
    window = KV_DUPLICATE_WINDOW_S if ttl_s <= 0 else min(KV_DUPLICATE_WINDOW_S, ttl_s)
    config: dict[str, Any] = {
        "name": kv_stream(spec.name),
        "subjects": [f"$KV.{spec.name}.>"],
        "retention": "limits",
        "max_msgs_per_subject": spec.history,
        "max_age": ns(ttl_s),
        "duplicate_window": ns(window),
        "num_replicas": replicas,
        "storage": "file",
        "discard": "new",
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "allow_direct": True,
    }
    if spec.message_ttl:
        config["allow_msg_ttl"] = True
    return config
