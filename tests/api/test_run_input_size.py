"""A run input too large for the run's first snapshot is refused with 413, naming the input.

Found from outside against ``dagnats dev`` (default body limit, 1 MiB): ``POST /runs`` with an
input of a million characters answered 500 ``internal`` (the first snapshot, which holds the
input twice, was over the server's ``max_payload``), after the run's index entry was written.
Then (session 12's audit): a workflow of three first steps and an input of 300 KiB, under the
input bound, answered 500 once the workflow had been read (the dispatched snapshot holds the
input four times) and, on its first start, stored a run that failed ``snapshot_too_large``;
``Service.start_run`` raised a raw ``TransportError``. The bounds are the server's own
``max_payload`` (``Transport.max_payload_bytes``): a server configured smaller refuses with 413
what it cannot store, where a 1 MiB bound let the start write half a run and answer 500.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import trio

from dagnats_trio.api import RUN_INPUT_MAX_BYTES, InputTooLarge, run_input_max_bytes
from dagnats_trio.api._rest_config import DEFAULT_MAX_BODY_BYTES
from dagnats_trio.api._start import idempotency_kv_key
from dagnats_trio.protocol import layout
from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import NatsTransport, Transport, open_nats_transport, provision

from ._stack import IDLE_TASK, IDLE_WORKFLOW, error_code, open_stack, unique

#: Bound on the run's first task reaching its step (no worker takes it: the step stays running).
RUN_STARTED_S = 10.0


def body_with_input_of(size: int) -> bytes:
    """A start whose input is a string encoded in exactly ``size`` bytes (quotes included)."""
    return json.dumps(
        {"workflow": IDLE_WORKFLOW, "input": "x" * (size - 2)}, separators=(",", ":")
    ).encode()


async def test_an_input_over_the_bound_is_413_and_one_at_it_runs(
    nats_transport: NatsTransport,
) -> None:
    async with open_stack(nats_transport, None, max_body_bytes=DEFAULT_MAX_BODY_BYTES) as api:
        listed = await api.client.get("/runs", params={"workflow": IDLE_WORKFLOW, "limit": 1000})
        before = len(listed.json()["runs"])
        for size in (RUN_INPUT_MAX_BYTES + 1, 2 * RUN_INPUT_MAX_BYTES):
            body = body_with_input_of(size)
            assert len(body) < DEFAULT_MAX_BODY_BYTES  # within the body limit: the input's bound
            r = await api.client.post("/runs", content=body)
            assert r.status_code == 413, r.text
            assert error_code(r) == "input_too_large"
            assert r.json()["error"]["message"].startswith(f"input is {size} bytes")
        listed = await api.client.get("/runs", params={"workflow": IDLE_WORKFLOW, "limit": 1000})
        assert len(listed.json()["runs"]) == before
        # At the bound the run starts: its first snapshot is stored and reads back, and its
        # step is dispatched (no worker serves it, so it stays running).
        r = await api.client.post("/runs", content=body_with_input_of(RUN_INPUT_MAX_BYTES))
        assert r.status_code == 201, r.text[:300]
        run_id = r.json()["run_id"]
        with trio.fail_after(RUN_STARTED_S):
            while True:
                got = await api.client.get(f"/runs/{run_id}")
                assert got.status_code == 200, got.text[:300]
                if got.json()["steps"][0]["status"] == "running":
                    break
                await trio.sleep(0.1)
        assert got.json()["status"] == "running"
        assert got.json()["input"] == "x" * (RUN_INPUT_MAX_BYTES - 2)


#: First steps of the wide workflow: its dispatched first snapshot holds an input four times.
WIDE_FIRST_STEPS = 3
#: An input under the bound that four copies put over one NATS message (1.2 MB).
WIDE_TOO_LARGE_BYTES = 300 * 1024
#: One whose four copies fit (800 KiB).
WIDE_FITTING_BYTES = 200 * 1024


async def test_an_input_too_large_for_several_first_steps_is_413_and_writes_nothing(
    nats_transport: NatsTransport,
) -> None:
    async with open_stack(nats_transport, None, max_body_bytes=DEFAULT_MAX_BODY_BYTES) as api:
        wide = unique("wide")
        steps = [{"id": f"s{i}", "task": IDLE_TASK} for i in range(WIDE_FIRST_STEPS)]
        await api.service.register_workflow({"name": wide, "steps": steps})
        keys_before = set(await nats_transport.kv_keys(layout.RUNS_BUCKET))
        big = "x" * WIDE_TOO_LARGE_BYTES
        # The first start reads the definition; the next ones take the kept one (the start
        # that indexes the run while the definition is read), with and without a key.
        for key in (None, None, "wide-key"):
            body = {"workflow": wide, "input": big, "idempotency_key": key}
            r = await api.client.post("/runs", json=body)
            assert r.status_code == 413, r.text[:300]
            assert error_code(r) == "input_too_large"
            message = r.json()["error"]["message"]
            assert message.startswith(f"input is {WIDE_TOO_LARGE_BYTES + 2} bytes"), message
            assert f"its {WIDE_FIRST_STEPS} first tasks" in message, message
        # Nothing of any of them was written: no index entry, snapshot or claimed key.
        assert set(await nats_transport.kv_keys(layout.RUNS_BUCKET)) == keys_before
        assert (
            await nats_transport.kv_get(layout.RUNS_BUCKET, idempotency_kv_key("wide-key")) is None
        )
        # The embedding API says the same, as a public error, not a transport one.
        with pytest.raises(InputTooLarge) as caught:
            await api.service.start_run(wide, big)
        assert caught.value.size_bytes == WIDE_TOO_LARGE_BYTES + 2
        with pytest.raises(InputTooLarge):
            await api.service.start_run(IDLE_WORKFLOW, "x" * RUN_INPUT_MAX_BYTES)
        assert set(await nats_transport.kv_keys(layout.RUNS_BUCKET)) == keys_before
        # An input whose copies fit starts, and each first step is dispatched.
        r = await api.client.post(
            "/runs", json={"workflow": wide, "input": "y" * WIDE_FITTING_BYTES}
        )
        assert r.status_code == 201, r.text[:300]
        run_id = r.json()["run_id"]
        with trio.fail_after(RUN_STARTED_S):
            while True:
                got = await api.client.get(f"/runs/{run_id}")
                assert got.status_code == 200, got.text[:300]
                if all(step["status"] == "running" for step in got.json()["steps"]):
                    break
                await trio.sleep(0.1)
        assert got.json()["status"] == "running"
        assert len(got.json()["steps"]) == WIDE_FIRST_STEPS


#: A ``max_payload`` a server may be configured with: a quarter of the default.
SMALL_MAX_PAYLOAD_BYTES = 256 * 1024
#: An input under the default server's bound and over this one's (96 KiB on it).
SMALL_TOO_LARGE_BYTES = 150 * 1024
#: An input of two first steps: its three copies are over this server's snapshot (252 KiB).
SMALL_WIDE_TOO_LARGE_BYTES = 90 * 1024
#: An input that fits this server's run of one first step.
SMALL_FITTING_BYTES = 80 * 1024


@pytest.fixture
async def small_transport() -> AsyncIterator[Transport]:
    """A provisioned transport on a server of its own, configured with a small ``max_payload``."""
    async with open_nats_server(max_payload_bytes=SMALL_MAX_PAYLOAD_BYTES) as server:
        url = server.url
        async with open_nats_transport(url) as transport:
            await provision(transport)
            yield transport


async def test_the_bounds_are_the_servers_own_max_payload(small_transport: Transport) -> None:
    assert small_transport.max_payload_bytes == SMALL_MAX_PAYLOAD_BYTES
    assert SMALL_TOO_LARGE_BYTES < RUN_INPUT_MAX_BYTES  # taken by a default server
    bound = run_input_max_bytes(SMALL_MAX_PAYLOAD_BYTES)
    assert SMALL_FITTING_BYTES < bound < SMALL_TOO_LARGE_BYTES
    async with open_stack(small_transport, None, max_body_bytes=DEFAULT_MAX_BODY_BYTES) as api:
        wide = unique("wide")
        steps = [{"id": f"s{i}", "task": IDLE_TASK} for i in range(2)]
        await api.service.register_workflow({"name": wide, "steps": steps})
        keys_before = set(await small_transport.kv_keys(layout.RUNS_BUCKET))
        r = await api.client.post("/runs", content=body_with_input_of(SMALL_TOO_LARGE_BYTES))
        assert r.status_code == 413, r.text[:300]
        assert error_code(r) == "input_too_large"
        assert f"the limit is {bound}" in r.json()["error"]["message"]
        for _ in range(2):  # the definition read, then the kept one
            body = {"workflow": wide, "input": "w" * SMALL_WIDE_TOO_LARGE_BYTES}
            r = await api.client.post("/runs", json=body)
            assert r.status_code == 413, r.text[:300]
            assert "first snapshot" in r.json()["error"]["message"]
        assert set(await small_transport.kv_keys(layout.RUNS_BUCKET)) == keys_before
        # An input this server can hold starts, and its step is dispatched.
        r = await api.client.post("/runs", content=body_with_input_of(SMALL_FITTING_BYTES))
        assert r.status_code == 201, r.text[:300]
        run_id = r.json()["run_id"]
        with trio.fail_after(RUN_STARTED_S):
            while True:
                got = await api.client.get(f"/runs/{run_id}")
                assert got.status_code == 200, got.text[:300]
                if got.json()["steps"][0]["status"] == "running":
                    break
                await trio.sleep(0.1)
