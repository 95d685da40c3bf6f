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
                    assert await InputsService(transport).list(run_id, STEP) == []
    [stored] = await InputsService(transport).list(run_id, STEP)
    assert stored.request_id == "r1"
