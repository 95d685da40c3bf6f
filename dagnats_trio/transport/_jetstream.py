"""JetStream over plain requests: the part both NATS transports share.

Both ``NatsTransport`` (nats-py) and ``TrioNatsTransport`` (the native client) reach JetStream
by sending JSON to ``$JS.API.*`` and reading the server's answer, and keep KV buckets as streams
by the KV conventions. Everything above one request (error codes, subject and key rules, KV
operations, stream configs) lives here once; a transport supplies only :meth:`_js_request`.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import trio

from ..protocol import loads_json
from ._errors import (
    KeyExists,
    NotFound,
    NotProvisioned,
    RevisionMismatch,
    TemporarilyUnavailable,
    TransportError,
    TransportTimeout,
    WrongLastSequence,
)
from ._values import (
    BucketSpec,
    ConsumerConfig,
    Headers,
    KvEntry,
    StoredMsg,
    StreamSpec,
    check_msg_ttl,
)

_log = logging.getLogger(__name__)

#: Bound on the messages ``kv_keys`` walks (every stored revision under the prefix counts).
KV_KEYS_MAX_MESSAGES = 1_000_000
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


# --- the operations ----------------------------------------------------------------------------


class JetStreamOverRequests(ABC):
    """Streams, message gets, KV and provisioning, each a request to ``$JS.API.*`` (or a
    publish whose ack is the answer); a transport supplies the one request."""

    @abstractmethod
    async def _js_request(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str] | None,
        what: str,
        timeout_s: float | None = None,
    ) -> bytes:
        """The answer's payload; raises the interface's errors (:class:`NoResponders` when
        nobody answered)."""

    async def _api(self, subject: str, body: Mapping[str, Any], what: str) -> dict[str, Any]:
        """A JetStream API request; its JSON answer, or the typed error it carries."""
        answer: dict[str, Any] = loads_json(
            await self._js_request(subject, json.dumps(body).encode(), None, what)
        )
        err = answer.get("error")
        if err is not None:
            raise json_error(err, what)
        return answer

    # --- streams -------------------------------------------------------------------------------

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        headers: Headers | None = None,
        msg_id: str | None = None,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        hdrs = dict(headers) if headers else None
        if msg_id is not None:
            hdrs = hdrs or {}
            hdrs[MSG_ID] = msg_id
        if expected_last_subject_seq is not None:
            hdrs = hdrs or {}
            hdrs[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_subject_seq)
        return await self._publish(subject, data, hdrs)

    async def _publish(self, subject: str, data: bytes, hdrs: dict[str, str] | None) -> int:
        try:
            answer = await self._js_request(subject, data, hdrs, "publish")
        except NoResponders:
            raise await self._why_no_stream(subject) from None
        seq = plain_pub_ack_seq(answer)
        if seq is not None:
            return seq
        ack = loads_json(answer)
        err = ack.get("error")
        if err is not None:
            error = json_error(err, f"publish to {subject!r}")
            if isinstance(error, WrongLastSequence) and hdrs and MSG_ID in hdrs:
                # nats-server checks the expected sequence before the duplicate window, so a
                # retry whose first attempt was stored (ack lost) looks fenced. If the subject
                # ends with that very message, the retry is a duplicate: return its sequence.
                last = await self.get_last_msg(str(ack.get("stream")), subject)
                if last is not None and last.headers.get(MSG_ID) == hdrs[MSG_ID]:
                    return last.seq
            raise error
        acked: int = ack["seq"]
        return acked

    async def _why_no_stream(self, subject: str) -> TransportError:
        """No responders to a publish: no stream for the subject, or its leader is missing."""
        answer = await self._api("$JS.API.STREAM.NAMES", {"subject": subject}, "stream lookup")
        if not answer.get("streams"):
            return NotProvisioned(f"no stream stores subject {subject!r}; run provisioning")
        return TemporarilyUnavailable(f"the stream for {subject!r} did not answer")

    async def get_msg(self, stream: str, seq: int) -> StoredMsg:
        answer = await self._api(
            f"$JS.API.STREAM.MSG.GET.{check_name('stream', stream)}",
            {"seq": seq},
            f"get {stream}#{seq}",
        )
        return stored_from_api(answer["message"])

    async def get_last_msg(self, stream: str, subject: str) -> StoredMsg | None:
        try:
            answer = await self._api(
                f"$JS.API.STREAM.MSG.GET.{check_name('stream', stream)}",
                {"last_by_subj": subject},
                f"last of {subject!r}",
            )
        except NotFound:
            return None
        return stored_from_api(answer["message"])

    async def read_subject(
        self, stream: str, subject: str, from_seq: int, limit: int
    ) -> list[StoredMsg]:
        api_subject = f"$JS.API.STREAM.MSG.GET.{check_name('stream', stream)}"
        out: list[StoredMsg] = []
        seq = max(from_seq, 1)
        while len(out) < limit:
            try:
                answer = await self._api(
                    api_subject, {"seq": seq, "next_by_subj": subject}, f"read {subject!r}"
                )
            except NotFound:
                break
            msg = stored_from_api(answer["message"])
            out.append(msg)
            seq = msg.seq + 1
        if not out:
            await trio.lowlevel.checkpoint()
        return out

    async def purge_subject(self, stream: str, subject: str) -> None:
        await self._api(
            f"$JS.API.STREAM.PURGE.{check_name('stream', stream)}",
            {"filter": subject},
            f"purge {subject!r}",
        )

    # --- key-value -----------------------------------------------------------------------------

    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        last = await self._kv_last(bucket, key)
        if last is None or is_delete_marker(last.headers):
            return None
        return KvEntry(bucket=bucket, key=key, value=last.data, revision=last.seq)

    async def _kv_last(self, bucket: str, key: str) -> StoredMsg | None:
        return await self.get_last_msg(kv_stream(bucket), kv_prefix(bucket) + check_key(key))

    async def kv_put(self, bucket: str, key: str, value: bytes) -> int:
        check_name("bucket", bucket)
        return await self._publish(kv_prefix(bucket) + check_key(key), value, None)

    async def kv_create(
        self, bucket: str, key: str, value: bytes, *, ttl_s: float | None = None
    ) -> int:
        check_name("bucket", bucket)
        subject = kv_prefix(bucket) + check_key(key)
        try:
            return await self._publish(
                subject, value, with_ttl({EXPECTED_LAST_SUBJECT_SEQ: "0"}, ttl_s)
            )
        except WrongLastSequence:
            pass
        # Present, or only a delete marker left (which counts as absent).
        last = await self._kv_last(bucket, key)
        if last is None or not is_delete_marker(last.headers):
            raise KeyExists(f"key {key!r} exists in bucket {bucket!r}") from None
        try:
            return await self._publish(
                subject, value, with_ttl({EXPECTED_LAST_SUBJECT_SEQ: str(last.seq)}, ttl_s)
            )
        except WrongLastSequence:
            raise KeyExists(f"key {key!r} exists in bucket {bucket!r}") from None

    async def kv_update(
        self, bucket: str, key: str, value: bytes, revision: int, *, ttl_s: float | None = None
    ) -> int:
        check_name("bucket", bucket)
        try:
            return await self._publish(
                kv_prefix(bucket) + check_key(key),
                value,
                with_ttl({EXPECTED_LAST_SUBJECT_SEQ: str(revision)}, ttl_s),
            )
        except WrongLastSequence:
            raise RevisionMismatch(
                f"key {key!r} in bucket {bucket!r} is not at revision {revision}"
            ) from None

    async def kv_delete(self, bucket: str, key: str, revision: int | None = None) -> None:
        check_name("bucket", bucket)
        hdrs = {KV_OP: "DEL"}
        if revision is not None:
            hdrs[EXPECTED_LAST_SUBJECT_SEQ] = str(revision)
        try:
            await self._publish(kv_prefix(bucket) + check_key(key), b"", hdrs)
        except WrongLastSequence:
            raise RevisionMismatch(
                f"key {key!r} in bucket {bucket!r} is not at revision {revision}"
            ) from None

    async def kv_keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Walk the bucket's stream with the leader's message get (``next_by_subj`` on the
        narrowest filter for ``prefix``): one round trip per stored message, no consumer.

        nats-py's ``keys()`` was not used: its watcher sends its "no more keys" marker when the
        consumer reports nothing pending and the subscription has not yet counted a delivery,
        which happens when the server pushed every key before the client parsed the first one;
        it then lists no keys at all (seen several times in 60 listings of 1,500 keys).
        """
        stream = kv_stream(bucket)
        subject = watch_filter(bucket, prefix)
        strip = len(kv_prefix(bucket))
        live: dict[str, bool] = {}
        seq = 1
        for _ in range(KV_KEYS_MAX_MESSAGES):
            found = await self.read_subject(stream, subject, seq, 1)
            if not found:
                break
            msg = found[0]
            key = msg.subject[strip:]
            if key.startswith(prefix):
                live[key] = not is_delete_marker(msg.headers)
            seq = msg.seq + 1
        else:
            raise TransportError(
                f"keys of {bucket!r}: more than {KV_KEYS_MAX_MESSAGES} stored messages under "
                f"{prefix!r}"
            )
        return sorted(k for k, alive in live.items() if alive)

    # --- provisioning --------------------------------------------------------------------------

    async def ensure_stream(self, spec: StreamSpec, replicas: int = 1) -> None:
        config = stream_config(spec, replicas)
        name = config["name"]
        try:
            await self._api(f"$JS.API.STREAM.CREATE.{name}", config, f"create stream {name}")
        except StreamNameInUse:
            existing = (await self.stream_info(name))["config"]
            update = keep_work_queue_retention(config, existing)
            if update["retention"] != config["retention"]:
                _log.info(
                    "stream %s keeps its %s retention (nats-server cannot change it; "
                    "docs/upgrading.md)",
                    name,
                    update["retention"],
                )
            await self._api(f"$JS.API.STREAM.UPDATE.{name}", update, f"update stream {name}")

    async def ensure_bucket(self, spec: BucketSpec, replicas: int = 1) -> None:
        await self._create_or_update(bucket_config(spec, replicas))

    async def ensure_consumer(self, config: ConsumerConfig) -> None:
        stream = check_name("stream", config.stream)
        durable = check_name("durable", config.durable)
        body: dict[str, Any] = {
            "durable_name": durable,
            "filter_subject": config.filter_subject,
            "ack_policy": "explicit",
            "ack_wait": ns(config.ack_wait_s),
            "max_deliver": config.max_deliver,
            "deliver_policy": "all",
        }
        if config.backoff_s:
            body["backoff"] = [ns(wait) for wait in config.backoff_s]
        await self._api(
            f"$JS.API.CONSUMER.CREATE.{stream}.{durable}",
            {"stream_name": stream, "config": body},
            f"ensure consumer {stream}/{durable}",
        )

    async def _create_or_update(self, config: Mapping[str, Any]) -> None:
        name = config["name"]
        try:
            await self._api(f"$JS.API.STREAM.CREATE.{name}", config, f"create stream {name}")
        except StreamNameInUse:
            await self._api(f"$JS.API.STREAM.UPDATE.{name}", config, f"update stream {name}")

    async def stream_info(self, stream: str) -> dict[str, Any]:
        """The server's stream info (JSON); for tests and diagnostics, not part of the protocol."""
        return await self._api(
            f"$JS.API.STREAM.INFO.{check_name('stream', stream)}", {}, f"info {stream}"
        )
