"""Listing runs with 100,000 stored (issue 12 item 4): ``GET /runs`` newest first and
``?status=running``, each timed over real HTTP (hypercorn, the API's own app) and at the
service, against the goal (first page under 100 ms, running under 200 ms).

The runs are stored through a bulk path, not the engine: each one is written by
``engine.create_snapshot`` (the one function that creates snapshots, so each gets its index
entry and, while running, its active marker, exactly as a started run does), many at once. The
store is a single nats-server without ``sync_interval: always``: fsyncing 300,000 writes would
measure the disk, and listing only reads. One run in :data:`RUNNING_EVERY` stays running.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable

import attrs
import httpx
import trio

from dagnats_trio.api import Service
from dagnats_trio.api.rest import create_app
from dagnats_trio.api.server import ApiServer
from dagnats_trio.engine import create_snapshot, ensure_run_index, new_run_snapshot
from dagnats_trio.inputs import InputsService
from dagnats_trio.protocol import RunStatus, WorkflowStarted
from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import open_trio_nats_transport, provision

from ._stack import percentile

RUNS = 100_000
QUICK_RUNS = 10_000
#: One run in this many stays running (the rest completed).
RUNNING_EVERY = 100
#: Runs written at once by the bulk path.
BULK_CONCURRENT = 256
#: Timed requests per figure (after one warm-up each).
SAMPLES = 30
PAGE_LIMIT = 100
WORKFLOW = "bench-listing"
#: Bound on the bulk load and on each timed request.
LOAD_TIMEOUT_S = 900.0
REQUEST_TIMEOUT_S = 30.0
GOAL_FIRST_PAGE_MS = 100.0
GOAL_RUNNING_MS = 200.0


async def _bulk_load(service: Service, runs: int) -> float:
    definition = await service.register_workflow(
        {"name": WORKFLOW, "steps": [{"id": "a", "task": "bench-listing-task"}]}
    )
    t0 = time.perf_counter()
    base_ms = int(time.time() * 1000) - runs

    async def writer(first: int) -> None:
        for n in range(first, runs, BULK_CONCURRENT):
            run_id = f"bl{n:06d}{secrets.token_hex(3)}"
            event = WorkflowStarted(run_id=run_id, workflow=WORKFLOW, started_at_ms=base_ms + n)
            snap = new_run_snapshot(event, definition, base_ms + n)
            if n % RUNNING_EVERY:
                snap = attrs.evolve(snap, status=RunStatus.COMPLETED, finished_at_ms=base_ms + n)
            await create_snapshot(service.transport, snap)

    with trio.fail_after(LOAD_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            for first in range(BULK_CONCURRENT):
                nursery.start_soon(writer, first)
    return time.perf_counter() - t0


async def _time_ms(call: Callable[[], Awaitable[None]]) -> list[float]:
    await call()  # warm-up
    out = []
    for _ in range(SAMPLES):
        t0 = time.perf_counter()
        with trio.fail_after(REQUEST_TIMEOUT_S):
            await call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _line(name: str, samples: list[float], goal_ms: float) -> str:
    p50, p99 = percentile(samples, 50), percentile(samples, 99)
    verdict = "meets" if p50 < goal_ms else "MISSES"
    return f"  {name:<34} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  ({verdict} < {goal_ms:.0f} ms)"


async def _main(runs: int) -> dict[str, float]:
    async with (
        open_nats_server(sync_always=False) as server,
        open_trio_nats_transport(server.url, name="bench-listing") as transport,
        trio.open_nursery() as nursery,
    ):
        await provision(transport)
        await ensure_run_index(transport)  # what a host does at start (a fresh store: at once)
        service = Service(transport)
        load_s = await _bulk_load(service, runs)
        running = runs // RUNNING_EVERY
        print(f"  stored {runs} runs ({running} running) in {load_s:.1f} s (bulk path)")
        app = create_app(service, InputsService(transport), transport)
        url = await nursery.start(ApiServer(app, "127.0.0.1", 0).run)
        async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_S) as client:

            async def get(params: dict[str, str]) -> None:
                r = await client.get("/runs", params=params)
                r.raise_for_status()
                assert len(r.json()["runs"]) == PAGE_LIMIT

            limit = str(PAGE_LIMIT)

            async def first_page() -> None:
                await get({"limit": limit})

            async def running_page() -> None:
                await get({"limit": limit, "status": "running"})

            first = await _time_ms(first_page)
            active = await _time_ms(running_page)

            async def second_page() -> None:
                page = (await client.get("/runs", params={"limit": limit})).json()
                await get({"limit": limit, "cursor": page["next_cursor"]})

            paged = await _time_ms(second_page)

            async def service_first() -> None:
                await service.list_runs(limit=PAGE_LIMIT)

            at_service = await _time_ms(service_first)
        nursery.cancel_scope.cancel()
    print(_line("GET /runs (first page)", first, GOAL_FIRST_PAGE_MS))
    print(_line("GET /runs?status=running", active, GOAL_RUNNING_MS))
    print(_line("first page + next page (2 GETs)", paged, 2 * GOAL_FIRST_PAGE_MS))
    print(_line("Service.list_runs (first page)", at_service, GOAL_FIRST_PAGE_MS))
    return {
        "listing_runs_stored": float(runs),
        "listing_first_page_p50_ms": round(percentile(first, 50), 1),
        "listing_running_p50_ms": round(percentile(active, 50), 1),
    }


def run(*, quick: bool = False) -> dict[str, float]:
    runs = QUICK_RUNS if quick else RUNS
    print(f"== listing: {PAGE_LIMIT} runs a page, {runs} runs stored, {SAMPLES} samples each")
    return trio.run(_main, runs)
