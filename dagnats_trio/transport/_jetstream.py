"""JetStream over plain requests: the part both NATS transports share.

Both ``NatsTransport`` (nats-py) and ``TrioNatsTransport`` (the native client) reach JetStream
by sending JSON to ``$JS.API.*`` and reading the server's answer, and keep KV buckets as streams
by the KV conventions. Everything above one request (the stream, message-get, KV and
provisioning operations) lives here once; a transport supplies only :meth:`_js_request`. The
requests sent at once (``publish_many``, ``purge_subjects``, ...) and the JSON API over the one
request are the base's, ``_jetstream_at_once``; the pure conventions they follow (error codes,
subject and key rules, stream configs) are in ``_jetstream_wire``.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Mapping
from typing import Any

import trio

from ._errors import (
    KeyExists,
    NotFound,
    RevisionMismatch,
    TransportError,
    WrongLastSequence,
)
from ._jetstream_at_once import (
    JetStreamAtOnce,
    json_pub_ack,
    kv_entry_of,
    last_msg_of,
    last_msg_request,
)
from ._jetstream_wire import (
    EXPECTED_LAST_SUBJECT_SEQ,
    KV_OP,
    MSG_ID,
    NoResponders,
    StreamNameInUse,
    bucket_config,
    check_key,
    check_name,
    is_delete_marker,
    keep_work_queue_retention,
    kv_prefix,
    kv_stream,
    ns,
    plain_pub_ack_seq,
    stored_from_api,
    stream_config,
    watch_filter,
    with_ttl,
)
from ._values import (
    BucketSpec,
    ConsumerConfig,
    Headers,
    KvEntry,
    StoredMsg,
    StreamSpec,
)

_log = logging.getLogger(__name__)

#: Bound on the messages ``kv_keys`` walks (every stored revision under the prefix counts).
KV_KEYS_MAX_MESSAGES = 1_000_000

# --- the operations ----------------------------------------------------------------------------


class JetStreamOverRequests(JetStreamAtOnce):
    """Streams, message gets, KV and provisioning, each a request to ``$JS.API.*`` (or a
    publish whose ack is the answer); a transport supplies the one request."""

    # --- streams -------------------------------------------------------------------------------

    def publish(
        self,
        subject: str,
        data: bytes,
        *,
        headers: Headers | None = None,
        msg_id: str | None = None,
        expected_last_subject_seq: int | None = None,
    ) -> Coroutine[Any, Any, int]:
        """The publish's coroutine (awaited at once by the caller, as any ``publish``), with no
        frame of this method in between: one frame fewer passed through when the ack wakes
        the caller, on every journal append and every event."""
        hdrs = dict(headers) if headers else None
        if msg_id is not None:
            hdrs = hdrs or {}
            hdrs[MSG_ID] = msg_id
        if expected_last_subject_seq is not None:
            hdrs = hdrs or {}
            hdrs[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_subject_seq)
        return self._publish(subject, data, hdrs)

    async def _publish(self, subject: str, data: bytes, hdrs: dict[str, str] | None) -> int:
        try:
            answer = await self._js_request(subject, data, hdrs, "publish")
        except NoResponders:
            raise await self._why_no_stream(subject) from None
        seq = plain_pub_ack_seq(answer)
        if seq is not None:
            return seq
        result, stream = json_pub_ack(answer, subject)
        if isinstance(result, int):
            return result
        if isinstance(result, WrongLastSequence) and hdrs and MSG_ID in hdrs:
            # nats-server checks the expected sequence before the duplicate window, so a
            # retry whose first attempt was stored (ack lost) looks fenced. If the subject
            # ends with that very message, the retry is a duplicate: return its sequence.
            last = await self.get_last_msg(stream, subject)
            if last is not None and last.headers.get(MSG_ID) == hdrs[MSG_ID]:
                return last.seq
        raise result

    async def get_msg(self, stream: str, seq: int) -> StoredMsg:
        answer = await self._api(
            f"$JS.API.STREAM.MSG.GET.{check_name('stream', stream)}",
            {"seq": seq},
            f"get {stream}#{seq}",
        )
        return stored_from_api(answer["message"])

    async def get_last_msg(self, stream: str, subject: str) -> StoredMsg | None:
        what = f"last of {subject!r}"
        answer = await self._js_request(*last_msg_request(stream, subject), what)
        return last_msg_of(answer, what)

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
        return kv_entry_of(bucket, key, await self._kv_last(bucket, key))

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
            "max_ack_pending": config.max_ack_pending,
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
