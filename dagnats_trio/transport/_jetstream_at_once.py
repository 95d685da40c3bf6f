"""JetStream requests sent at once, each answered on its own: the base both NATS transports'
JetStream (``_jetstream``) stands on.

A caller with several independent requests (a run's index entry and active marker, a run end's
purges, a start's index beside its definition's read) would otherwise need a task per request
to wait on them together: a task spawned, stepped and waited for, and a socket write each.
Here they are one call: the native client sends them in one write and waits for every answer
in the caller's task (:meth:`JetStreamAtOnce._js_requests`, which it overrides); nats-py makes a
task each. Every request is answered (stored, refused or failed) whatever the others' answers,
so each result is that request's alone.
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from .._concurrency import run_all
from ..protocol import loads_json
from ._errors import Closed, NotFound, NotProvisioned, TemporarilyUnavailable, TransportError
from ._jetstream_wire import (
    EXPECTED_LAST_SUBJECT_SEQ,
    MSG_ID,
    NoResponders,
    check_key,
    check_name,
    is_delete_marker,
    json_error,
    kv_prefix,
    kv_stream,
    plain_pub_ack_seq,
    stored_from_api,
)
from ._values import KvEntry, PublishMsg, StoredMsg, SubjectPurge

#: One request: subject, payload, headers.
Request = tuple[str, bytes, Mapping[str, str] | None]


def json_pub_ack(answer: bytes, subject: str) -> tuple[int | TransportError, str]:
    """A publish's answer that is not a plain ack (``plain_pub_ack_seq``): its sequence or the
    error it carries, and the stream it names."""
    ack = loads_json(answer)
    err = ack.get("error")
    if err is not None:
        return json_error(err, f"publish to {subject!r}"), str(ack.get("stream"))
    return int(ack["seq"]), str(ack.get("stream"))


def last_msg_request(stream: str, subject: str) -> Request:
    """The leader's message get of the last message on ``subject``."""
    api = f"$JS.API.STREAM.MSG.GET.{check_name('stream', stream)}"
    return api, json.dumps({"last_by_subj": subject}).encode(), None


def last_msg_of(answer: bytes, what: str) -> StoredMsg | None:
    """The answer to :func:`last_msg_request`: the message, None when the subject holds none;
    raises the error it carries."""
    body = loads_json(answer)
    err = body.get("error")
    if err is not None:
        exc = json_error(err, what)
        if isinstance(exc, NotFound):
            return None
        raise exc
    return stored_from_api(body["message"])


def kv_entry_of(bucket: str, key: str, last: StoredMsg | None) -> KvEntry | None:
    """The key's entry, from the last message of its subject (a delete marker: None)."""
    if last is None or is_delete_marker(last.headers):
        return None
    return KvEntry(bucket=bucket, key=key, value=last.data, revision=last.seq)


def _publish_requests(msgs: Sequence[PublishMsg]) -> list[Request]:
    return [(m.subject, m.data, _publish_headers(m)) for m in msgs]


def _publish_headers(m: PublishMsg) -> dict[str, str] | None:
    if m.msg_id is None and m.expected_last_subject_seq is None:
        return None
    hdrs: dict[str, str] = {}
    if m.msg_id is not None:
        hdrs[MSG_ID] = m.msg_id
    if m.expected_last_subject_seq is not None:
        hdrs[EXPECTED_LAST_SUBJECT_SEQ] = str(m.expected_last_subject_seq)
    return hdrs


class JetStreamAtOnce(ABC):
    """The one request a transport supplies (:meth:`_js_request`), the JSON API over it, and
    the operations that send several requests at once."""

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

    async def _js_requests(
        self, requests: Sequence[Request], what: str
    ) -> list[bytes | TransportError]:
        """Each request's answer, or the error it got (not connected and closed raise), the
        requests made at once: a task each (a transport that can send them in one write
        overrides this)."""
        answers: list[bytes | TransportError] = [b""] * len(requests)

        async def one(i: int) -> None:
            subject, payload, headers = requests[i]
            try:
                answers[i] = await self._js_request(subject, payload, headers, what)
            except NoResponders as exc:
                answers[i] = exc
            except (TemporarilyUnavailable, Closed):
                raise
            except TransportError as exc:
                answers[i] = exc

        await run_all(
            [functools.partial(one, i) for i in range(len(requests))],
            in_flight_max=max(1, len(requests)),
        )
        return answers

    async def _why_no_stream(self, subject: str) -> TransportError:
        """No responders to a publish: no stream for the subject, or its leader is missing."""
        answer = await self._api("$JS.API.STREAM.NAMES", {"subject": subject}, "stream lookup")
        if not answer.get("streams"):
            return NotProvisioned(f"no stream stores subject {subject!r}; run provisioning")
        return TemporarilyUnavailable(f"the stream for {subject!r} did not answer")

    async def publish_many(self, msgs: Sequence[PublishMsg]) -> list[int | TransportError]:
        answers = await self._js_requests(_publish_requests(msgs), "publish")
        return await self._published(msgs, answers)

    async def _published(
        self, msgs: Sequence[PublishMsg], answers: Sequence[bytes | TransportError]
    ) -> list[int | TransportError]:
        """Each publish's sequence or error, from its answer."""
        results: list[int | TransportError] = []
        for m, answer in zip(msgs, answers, strict=True):
            if isinstance(answer, NoResponders):
                results.append(await self._why_no_stream(m.subject))
            elif isinstance(answer, TransportError):
                results.append(answer)
            elif (seq := plain_pub_ack_seq(answer)) is not None:
                results.append(seq)
            else:
                results.append(json_pub_ack(answer, m.subject)[0])
        return results

    async def purge_subjects(self, purges: Sequence[SubjectPurge]) -> list[TransportError | None]:
        requests = [
            (
                f"$JS.API.STREAM.PURGE.{check_name('stream', p.stream)}",
                json.dumps({"filter": p.subject}).encode(),
                None,
            )
            for p in purges
        ]
        results: list[TransportError | None] = []
        for p, answer in zip(purges, await self._js_requests(requests, "purge"), strict=True):
            if isinstance(answer, TransportError):
                results.append(answer)
                continue
            err = loads_json(answer).get("error")
            results.append(None if err is None else json_error(err, f"purge {p.subject!r}"))
        return results

    async def kv_get_and_publish_many(
        self, bucket: str, key: str, msgs: Sequence[PublishMsg]
    ) -> tuple[KvEntry | TransportError | None, list[int | TransportError]]:
        subject = kv_prefix(bucket) + check_key(key)
        read = last_msg_request(kv_stream(bucket), subject)
        answers = await self._js_requests([read, *_publish_requests(msgs)], "read and publish")
        first, rest = answers[0], answers[1:]
        entry: KvEntry | TransportError | None
        if isinstance(first, TransportError):
            entry = first
        else:
            try:
                entry = kv_entry_of(bucket, key, last_msg_of(first, f"last of {subject!r}"))
            except TransportError as exc:
                entry = exc
        return entry, await self._published(msgs, rest)
