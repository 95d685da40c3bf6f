"""The journal reader: pages with a cursor, and the live event stream with resume."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio

from dagnats_trio.engine import decode_snapshot
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    DispatchId,
    JournalRecord,
    ModelRecord,
    StepCompleted,
    encode_event,
    layout,
)

from ._sse import SseEvent, sse_events
from ._stack import RUN_FINISH_S, Stack, error_code, idle_run, unique

#: Bound on each wait for an event of the stream.
EVENT_WAIT_S = 5.0


def model(call: int) -> ModelRecord:
    return ModelRecord(iteration=0, attempt=1, claim_id="c1", call=call, response={"n": call})


def claim() -> ClaimRecord:
    return ClaimRecord(iteration=0, attempt=1, claim_id="c1", nonce="n1")


def journal_path(run_id: str, step: str = "agent") -> str:
    return f"/runs/{run_id}/steps/{step}/journal"


async def current_dispatch(api: Stack, run_id: str) -> DispatchId:
    """The agent step's dispatch, waiting (bounded) for the engine to make the first one."""
    key = layout.run_key(run_id)
    with trio.fail_after(RUN_FINISH_S):
        # Watch first, then read: a change between the two is seen by the watch.
        async with api.transport.kv_watch(layout.RUNS_BUCKET, key) as changes:
            dispatch = (await api.service.get_run(run_id)).steps["agent"].dispatch
            if dispatch is not None:
                return dispatch
            async for entry in changes:
                if entry.key == key and entry.value is not None:
                    dispatch = decode_snapshot(entry.value).steps["agent"].dispatch
                    if dispatch is not None:
                        return dispatch
    raise AssertionError("the watch ended without a dispatch")


async def finish_step(api: Stack, run_id: str) -> None:
    """Complete the idle step the way its worker would, with the current dispatch."""
    dispatch = await current_dispatch(api, run_id)
    event = StepCompleted(run_id=run_id, step_id="agent", dispatch=dispatch, output="done")
    await api.transport.publish(layout.history_subject(run_id), encode_event(event))


async def test_pages_with_cursor(any_api: Stack) -> None:
    run_id = await idle_run(any_api)
    records: list[JournalRecord] = [claim(), model(0), model(1)]
    seqs = [await any_api.append(run_id, "agent", r) for r in records]

    r = await any_api.client.get(journal_path(run_id))
    assert r.status_code == 200
    page = r.json()
    assert [e["seq"] for e in page["records"]] == seqs
    assert [e["type"] for e in page["records"]] == ["claim", "model", "model"]
    assert page["records"][1]["record"]["response"] == {"n": 0}
    assert page["records"][1]["record"]["type"] == "model"
    assert page["next"] == seqs[-1] + 1

    r = await any_api.client.get(journal_path(run_id), params={"limit": "2"})
    first = r.json()
    assert [e["seq"] for e in first["records"]] == seqs[:2]
    r = await any_api.client.get(journal_path(run_id), params={"from": str(first["next"])})
    rest = r.json()
    assert [e["seq"] for e in rest["records"]] == seqs[2:]
    r = await any_api.client.get(journal_path(run_id), params={"from": str(rest["next"])})
    assert r.json() == {"records": [], "next": rest["next"]}


async def test_undecodable_record_is_reported_not_fatal(api: Stack) -> None:
    run_id = await idle_run(api)
    await api.transport.publish(layout.journal_subject(run_id, "agent"), b"{oops")
    r = await api.client.get(journal_path(run_id))
    assert r.status_code == 200
    [entry] = r.json()["records"]
    assert entry["record"] is None
    assert "JSON" in entry["error"]


async def test_journal_errors(api: Stack) -> None:
    run_id = await idle_run(api)
    r = await api.client.get(journal_path(run_id, "nostep"))
    assert r.status_code == 404
    assert error_code(r) == "step_not_found"
    r = await api.client.get(journal_path(run_id, "bad.step"))
    assert r.status_code == 400  # not an id at all: a bad request naming the field
    assert error_code(r) == "invalid_step_id" and "step_id" in r.json()["error"]["message"]
    r = await api.client.get(journal_path(unique("run")))
    assert r.status_code == 404
    assert error_code(r) == "run_not_found"
    for bad in ({"from": "x"}, {"limit": "0"}, {"limit": "100000"}, {"follow": "maybe"}):
        r = await api.client.get(journal_path(run_id), params=bad)
        assert r.status_code == 400, bad
    r = await api.client.get(
        journal_path(run_id), params={"follow": "1"}, headers={"Last-Event-ID": "abc"}
    )
    assert r.status_code == 400
    r = await api.client.post(journal_path(run_id))
    assert r.status_code == 405


async def test_stream_is_live_resumes_without_gap_and_ends(any_api: Stack) -> None:
    run_id = await idle_run(any_api)
    seqs = [await any_api.append(run_id, "agent", r) for r in (claim(), model(0))]
    received: list[SseEvent] = []

    # First connection: the two existing records, then one appended while connected.
    with trio.fail_after(EVENT_WAIT_S * 3):
        async with any_api.client.stream(
            "GET", journal_path(run_id), params={"follow": "1"}
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = sse_events(response)
            for _ in range(2):
                received.append(await anext(events))
            seqs.append(await any_api.append(run_id, "agent", model(1)))
            received.append(await anext(events))
    assert [int(e.id or 0) for e in received] == seqs
    assert [e.event for e in received] == ["claim", "model", "model"]
    assert received[2].json()["record"]["response"] == {"n": 1}
    assert received[2].json()["seq"] == seqs[2]

    # Records written while disconnected, then a reconnect with Last-Event-ID.
    seqs.append(await any_api.append(run_id, "agent", model(2)))
    seqs.append(await any_api.append(run_id, "agent", model(3)))
    resumed: list[SseEvent] = []
    ended: SseEvent | None = None
    with trio.fail_after(EVENT_WAIT_S * 4):
        async with any_api.client.stream(
            "GET",
            journal_path(run_id),
            params={"follow": "1", "from": "1"},
            headers={"Last-Event-ID": str(received[-1].id)},
        ) as response:
            events = sse_events(response)
            for _ in range(2):
                resumed.append(await anext(events))
            commit = CommitRecord(
                iteration=0,
                attempt=1,
                claim_id="c1",
                nonce="n1",
                action=CommitAction.COMPLETE,
                output="done",
            )
            seqs.append(await any_api.append(run_id, "agent", commit))
            resumed.append(await anext(events))
            await finish_step(any_api, run_id)
            async for event in events:
                ended = event
                break
    assert [int(e.id or 0) for e in received + resumed] == seqs  # no gap, no repeat
    assert resumed[-1].event == "commit"
    assert ended is not None and ended.event == "end"
    assert ended.json()["step_status"] == "completed"


async def test_a_record_group_is_one_message_read_whole_and_resumed_inside(api: Stack) -> None:
    """Records stored as one message (a record group) share its sequence: a page gives each of
    them (``limit`` counts messages, so a page never cuts a message), and the live stream gives
    each its own id, the message's sequence on its last record and ``{seq}.{k}`` before it, so
    a reconnect between the two records of one message resumes with the second: no gap, no
    repeat."""
    run_id = await idle_run(api)
    s_claim = await api.append(run_id, "agent", claim())
    s_group = await api.append_group(run_id, "agent", [model(0), model(1)])
    assert s_group == s_claim + 1
    s_last = await api.append(run_id, "agent", model(2))

    page = (await api.client.get(journal_path(run_id), params={"limit": "2"})).json()
    assert [(e["seq"], e["type"]) for e in page["records"]] == [
        (s_claim, "claim"), (s_group, "model"), (s_group, "model")
    ]  # fmt: skip
    assert [e["record"]["call"] for e in page["records"][1:]] == [0, 1]
    assert page["next"] == s_group + 1
    rest = (await api.client.get(journal_path(run_id), params={"from": str(page["next"])})).json()
    assert [(e["seq"], e["record"]["call"]) for e in rest["records"]] == [(s_last, 2)]

    # Cut the stream right after the first record of the group.
    with trio.fail_after(EVENT_WAIT_S * 2):
        async with api.client.stream(
            "GET", journal_path(run_id), params={"follow": "1"}
        ) as response:
            events = sse_events(response)
            first = [await anext(events), await anext(events)]
    assert [e.id for e in first] == [str(s_claim), f"{s_group}.1"]
    assert first[1].json()["record"]["call"] == 0
    resumed: list[SseEvent] = []
    with trio.fail_after(EVENT_WAIT_S * 2):
        async with api.client.stream(
            "GET",
            journal_path(run_id),
            params={"follow": "1"},
            headers={"Last-Event-ID": f"{s_group}.1"},
        ) as response:
            events = sse_events(response)
            resumed = [await anext(events), await anext(events)]
    assert [(e.id, e.json()["record"]["call"]) for e in resumed] == [
        (str(s_group), 1), (str(s_last), 2)
    ]  # fmt: skip
    # After the whole message: the next message, nothing of the group again.
    with trio.fail_after(EVENT_WAIT_S * 2):
        async with api.client.stream(
            "GET",
            journal_path(run_id),
            params={"follow": "1"},
            headers={"Last-Event-ID": str(s_group)},
        ) as response:
            after = await anext(sse_events(response))
    assert (after.id, after.json()["record"]["call"]) == (str(s_last), 2)
    for bad in ("1.0", "1.x", "1.", ".1", "1.2.3", "-1"):
        r = await api.client.get(
            journal_path(run_id), params={"follow": "1"}, headers={"Last-Event-ID": bad}
        )
        assert r.status_code == 400, bad
        assert error_code(r) == "invalid_last_event_id"


@asynccontextmanager
async def cutting_proxy(
    upstream_url: str, cut_after: bytes, requests: list[bytes]
) -> AsyncIterator[str]:
    """A TCP proxy to ``upstream_url`` that closes its FIRST connection right after the server
    sent the event holding ``cut_after`` (through that event's blank line); later connections
    pass through. ``requests`` gets each connection's request bytes."""
    upstream = httpx.URL(upstream_url)
    first = [True]

    async def handle(client: trio.SocketStream) -> None:
        cut, first[0] = first[0], False
        requests.append(b"")
        k = len(requests) - 1
        up = await trio.open_tcp_stream(upstream.host, upstream.port or 80)
        async with client, up, trio.open_nursery() as nursery:

            async def to_server() -> None:
                async for data in client:
                    requests[k] += data
                    await up.send_all(data)

            async def to_client() -> None:
                held = b""
                async for data in up:
                    if not cut:
                        await client.send_all(data)
                        continue
                    held += data
                    at = held.find(cut_after)
                    end = held.find(b"\n\n", at) if at >= 0 else -1
                    if end >= 0:
                        await client.send_all(held[: end + 2])
                        nursery.cancel_scope.cancel()
                nursery.cancel_scope.cancel()

            nursery.start_soon(to_server)
            nursery.start_soon(to_client)

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


async def test_the_cli_follow_resumes_inside_a_message_after_a_cut(api: Stack) -> None:
    """The CLI's follow, its first connection cut right after the first record of a message
    holding two: it reconnects with that record's id (``{seq}.1``) and gets the second record,
    then the rest and the end: every record once, in order."""
    from dagnats_trio.cli import ApiClient

    run_id = await idle_run(api)
    s_claim = await api.append(run_id, "agent", claim())
    s_group = await api.append_group(run_id, "agent", [model(0), model(1)])
    s_last = await api.append(run_id, "agent", model(2))
    await finish_step(api, run_id)
    await api.service.wait_for_run(run_id, RUN_FINISH_S)
    requests: list[bytes] = []
    with trio.fail_after(EVENT_WAIT_S * 2):
        async with (
            cutting_proxy(api.url, f"id: {s_group}.1\n".encode(), requests) as url,
            ApiClient(url) as client,
        ):
            got = [item async for item in client.follow_journal(run_id, "agent")]
    records = [(i.entry.seq, i.entry.record["call"] if i.entry.type == "model" else None)
               for i in got if i.entry is not None]  # fmt: skip
    assert records == [(s_claim, None), (s_group, 0), (s_group, 1), (s_last, 2)]
    assert got[-1].entry is None and got[-1].end_step_status == "completed"
    assert len(requests) == 2
    assert f"last-event-id: {s_group}.1\r\n".encode() in requests[1].lower()


async def test_stream_of_finished_step_sends_all_then_ends(any_api: Stack) -> None:
    run_id = await idle_run(any_api)
    seqs = [await any_api.append(run_id, "agent", r) for r in (claim(), model(0))]
    await finish_step(any_api, run_id)
    await any_api.service.wait_for_run(run_id, RUN_FINISH_S)
    with trio.fail_after(EVENT_WAIT_S):
        async with any_api.client.stream(
            "GET", journal_path(run_id), params={"follow": "1"}
        ) as response:
            got = [e async for e in sse_events(response)]
    assert [int(e.id or 0) for e in got[:-1]] == seqs
    assert got[-1].event == "end"
    assert got[-1].id is None


async def test_stream_disconnect_leaves_server_serving(any_api: Stack) -> None:
    run_id = await idle_run(any_api)
    await any_api.append(run_id, "agent", claim())
    for _ in range(3):
        with trio.fail_after(EVENT_WAIT_S):
            async with any_api.client.stream(
                "GET", journal_path(run_id), params={"follow": "1"}
            ) as response:
                first = await anext(sse_events(response))
                assert first.event == "claim"
    r = await any_api.client.get("/healthz")
    assert r.status_code == 200


async def test_a_parallel_group_as_the_reader_and_the_audit_show_it(any_api: Stack) -> None:
    """A group run through ``Journal.tools`` (one member fails and cancels the other): the REST
    reader shows each intent's group, size and call id, both at one sequence (the intents are one
    message), the cancelled result names the failed member, and the check route is clean."""
    from dagnats_trio.journal import Replay, ToolCall, open_journal
    from tests.journal._helpers import make_task

    run_id = await idle_run(any_api)
    j = await open_journal(any_api.transport, make_task(run_id))
    written = trio.Event()

    async def fails(call: ToolCall) -> None:
        await written.wait()
        raise ValueError("no such user")

    async def waits(call: ToolCall) -> None:
        await j.tool_output("half")
        written.set()
        await trio.sleep_forever()

    with trio.fail_after(EVENT_WAIT_S):
        await j.tools(
            [
                (ToolCall("lookup", {"u": 1}, call_id="call_a"), Replay.SAFE, fails),
                (ToolCall("upload", {"f": 2}, call_id="call_b"), Replay.UNSAFE, waits),
            ],
            cancel_on_error=True,
        )
        await j.settle(CommitAction.COMPLETE)
    page = (await any_api.client.get(journal_path(run_id))).json()
    entries = page["records"]
    intents = [e for e in entries if e["type"] == "tool.intent"]
    assert [(e["batch"], e["record"]["group"], e["record"]["group_size"],
             e["record"]["call_id"]) for e in intents] == [
        (None, 0, 2, "call_a"), (None, 0, 2, "call_b")
    ]  # fmt: skip
    assert intents[0]["seq"] == intents[1]["seq"]  # one message: stored whole
    results = {e["record"]["call"]: e["record"] for e in entries if e["type"] == "tool.result"}
    assert results[0]["error"] == "ValueError: no such user" and results[0]["cancelled_by"] is None
    assert results[1]["cancelled_by"] == 0 and results[1]["interrupted"] is True
    assert results[1]["partial"] == ["half"]
    audit = (await any_api.client.get(journal_path(run_id) + "/check")).json()
    assert audit["ok"] is True, audit
