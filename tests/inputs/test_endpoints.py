"""The NATS endpoints api.inputs.submit|get|withdraw over a real server (and the sim)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from dagnats_trio.inputs import (
    GET_SUBJECT,
    SUBMIT_SUBJECT,
    WITHDRAW_SUBJECT,
    ErrorReply,
    InputsEndpoints,
    InputsService,
    SubmissionReply,
    SubmissionStatus,
    decode_reply,
)
from dagnats_trio.transport import Transport

from ._helpers import new_run_id, write_snapshot

STEP = "agent"
TEST_DEADLINE_S = 10.0
REQUEST_TIMEOUT_S = 5.0
TOKEN = "s3cret-token"


@asynccontextmanager
async def serving(transport: Transport, token: str | None = None) -> AsyncIterator[InputsEndpoints]:
    endpoints = InputsEndpoints(transport, InputsService(transport), token=token)
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoints.run)
        yield endpoints
        nursery.cancel_scope.cancel()


async def call(transport: Transport, subject: str, body: object) -> SubmissionReply | ErrorReply:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return decode_reply(await transport.request(subject, data, timeout_s=REQUEST_TIMEOUT_S))


async def test_submit_get_withdraw_over_nats(transport: Transport) -> None:
    run_id = new_run_id()
    await write_snapshot(transport, run_id, {STEP: "running"})
    ref = {"run_id": run_id, "step_id": STEP, "request_id": "msg-42"}
    with trio.fail_after(TEST_DEADLINE_S):
        async with serving(transport):
            first = await call(
                transport, SUBMIT_SUBJECT, {**ref, "mode": "steer", "content": {"text": "hi"}}
            )
            assert isinstance(first, SubmissionReply)
            assert first.status == 201
            assert first.submission.content == {"text": "hi"}
            repeat = await call(
                transport, SUBMIT_SUBJECT, {**ref, "mode": "follow_up", "content": "other"}
            )
            assert isinstance(repeat, SubmissionReply)
            assert (repeat.status, repeat.submission) == (200, first.submission)

            got = await call(transport, GET_SUBJECT, {**ref, "wait": "200ms"})
            assert isinstance(got, SubmissionReply)
            assert (got.status, got.submission.status) == (200, SubmissionStatus.QUEUED)

            gone = await call(transport, WITHDRAW_SUBJECT, ref)
            assert isinstance(gone, SubmissionReply)
            assert (gone.status, gone.submission.status) == (204, SubmissionStatus.WITHDRAWN)
            got = await call(transport, GET_SUBJECT, {**ref, "since": "queued", "wait": 5000})
            assert isinstance(got, SubmissionReply)
            assert got.submission.status is SubmissionStatus.WITHDRAWN


async def test_errors_are_replies_with_code_and_status(transport: Transport) -> None:
    run_id = new_run_id()
    await write_snapshot(transport, run_id, {STEP: "running", "fin": "cancelled"})
    cases: list[tuple[str, object, int, str]] = [
        (SUBMIT_SUBJECT, b"{not json", 400, "invalid_request"),
        (SUBMIT_SUBJECT, [1, 2], 400, "invalid_request"),
        (
            SUBMIT_SUBJECT,
            {"run_id": run_id, "step_id": STEP, "mode": "steer"},
            400,
            "invalid_request_id",
        ),
        (
            SUBMIT_SUBJECT,
            {"run_id": run_id, "step_id": STEP, "request_id": "r", "mode": "yell"},
            400,
            "invalid_mode",
        ),
        (
            SUBMIT_SUBJECT,
            {"run_id": new_run_id(), "step_id": STEP, "request_id": "r", "mode": "steer"},
            404,
            "run_not_found",
        ),
        (
            SUBMIT_SUBJECT,
            {"run_id": run_id, "step_id": "nope", "request_id": "r", "mode": "steer"},
            404,
            "step_not_found",
        ),
        (
            SUBMIT_SUBJECT,
            {"run_id": run_id, "step_id": "fin", "request_id": "r", "mode": "steer"},
            409,
            "step_finished",
        ),
        (
            SUBMIT_SUBJECT,
            {
                "run_id": run_id,
                "step_id": STEP,
                "request_id": "r",
                "mode": "steer",
                "content": "x" * (65 * 1024),
            },
            413,
            "content_too_large",
        ),
        (
            GET_SUBJECT,
            {"run_id": run_id, "step_id": STEP, "request_id": "none"},
            404,
            "input_not_found",
        ),
        (
            GET_SUBJECT,
            {"run_id": run_id, "step_id": STEP, "request_id": "r", "since": "later"},
            400,
            "invalid_since",
        ),
        (
            WITHDRAW_SUBJECT,
            {"run_id": run_id, "step_id": STEP, "request_id": "none"},
            404,
            "input_not_found",
        ),
    ]
    with trio.fail_after(TEST_DEADLINE_S):
        async with serving(transport):
            for subject, body, status, code in cases:
                reply = await call(transport, subject, body)
                assert isinstance(reply, ErrorReply), (subject, body)
                assert (reply.status, reply.error.code) == (status, code), reply
                assert reply.error.message
            # After all that, a valid submission still works.
            ok = await call(
                transport,
                SUBMIT_SUBJECT,
                {"run_id": run_id, "step_id": STEP, "request_id": "r", "mode": "steer"},
            )
            assert isinstance(ok, SubmissionReply) and ok.status == 201


async def test_a_configured_token_is_required(transport: Transport) -> None:
    run_id = new_run_id()
    await write_snapshot(transport, run_id, {STEP: "running"})
    body = {"run_id": run_id, "step_id": STEP, "request_id": "r1", "mode": "steer", "content": 1}
    data = json.dumps(body).encode()
    with trio.fail_after(TEST_DEADLINE_S):
        async with serving(transport, token=TOKEN):
            reply = await call(transport, SUBMIT_SUBJECT, body)
            assert isinstance(reply, ErrorReply)
            assert (reply.status, reply.error.code) == (401, "unauthorized")
            assert "required" in reply.error.message
            assert await InputsService(transport).list(run_id, STEP) == []

            # The token travels as a header of the request, over the server like any client's.
            for headers, expected in (
                ({"Authorization": "Bearer wrong"}, 401),
                ({"Authorization": f"Basic {TOKEN}"}, 401),
                ({"authorization": f"Bearer {TOKEN}"}, 201),
                ({"Authorization": f"Bearer {TOKEN}"}, 200),
            ):
                raw = await transport.request(
                    SUBMIT_SUBJECT, data, timeout_s=REQUEST_TIMEOUT_S, headers=headers
                )
                answer = decode_reply(raw)
                assert answer.status == expected, (headers, answer)
                if expected >= 400:
                    assert isinstance(answer, ErrorReply)
                    assert answer.error.code == "unauthorized"
                    told = "is wrong" if headers["Authorization"] == "Bearer wrong" else "required"
                    assert told in answer.error.message, (headers, answer)
                    assert await InputsService(transport).list(run_id, STEP) == []
    [stored] = await InputsService(transport).list(run_id, STEP)
    assert stored.request_id == "r1"


#: Ids that are not tokens: refused as run and step ids, and the first three as request ids too.
BAD_IDS = ("r\n", "a\x00b", "\u2028", "a.b", "a b", "*", ">")
CHAT_REQUEST_IDS = ("slack:C024BE91L:1700000000.000200", "a.b", "a b*>", "émoji 👋", "a/b", "a")


async def test_ids_on_the_nats_endpoints(transport: Transport) -> None:
    """A bad id is an error reply naming its field; a chat-style request id round-trips."""
    run_id = new_run_id()
    await write_snapshot(transport, run_id, {STEP: "running"})
    ok = {"run_id": run_id, "step_id": STEP, "request_id": "r", "mode": "steer", "content": 1}
    with trio.fail_after(TEST_DEADLINE_S):
        async with serving(transport):
            for bad in BAD_IDS:
                fields = ["run_id", "step_id"] + (["request_id"] if bad in BAD_IDS[:3] else [])
                for field in fields:
                    for subject in (SUBMIT_SUBJECT, GET_SUBJECT, WITHDRAW_SUBJECT):
                        reply = await call(transport, subject, {**ok, field: bad})
                        assert isinstance(reply, ErrorReply), (subject, field, bad, reply)
                        assert (reply.status, reply.error.code) == (400, f"invalid_{field}")
                        assert reply.error.message.startswith(f"{field} ")
            assert await InputsService(transport).list(run_id, STEP) == []
            for n, rid in enumerate(CHAT_REQUEST_IDS):
                sent = await call(
                    transport, SUBMIT_SUBJECT, {**ok, "request_id": rid, "content": n}
                )
                assert isinstance(sent, SubmissionReply) and sent.status == 201, (rid, sent)
                got = await call(transport, GET_SUBJECT, {**ok, "request_id": rid})
                assert isinstance(got, SubmissionReply), (rid, got)
                assert (got.submission.request_id, got.submission.content) == (rid, n)
            gone = await call(transport, WITHDRAW_SUBJECT, {**ok, "request_id": "a.b"})
            assert isinstance(gone, SubmissionReply) and gone.status == 204
            listed = await InputsService(transport).list(run_id, STEP)
            assert [s.request_id for s in listed] == list(CHAT_REQUEST_IDS)
            assert [s.status for s in listed].count(SubmissionStatus.WITHDRAWN) == 1
