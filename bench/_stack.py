"""One engine, one worker and a client, each on its own transport, on an embedded server.

Separate transports so each side's NATS round trips are counted apart. Runs are watched
through one long-lived KV watch on the client, so waiting for a run costs no round trips of its
own: the per-run figures are what the product spends, not what the benchmark spends observing.
"""

from __future__ import annotations

import inspect
import json
import statistics
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, cast

import attrs
import trio

from dagnats_trio.api.service import Service
from dagnats_trio.engine import Engine
from dagnats_trio.engine.outcome import RunOutcome, decode_run_outcome
from dagnats_trio.protocol import may_be_finished
from dagnats_trio.protocol.layout import HISTORY_STREAM, RUNS_BUCKET
from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import (
    StreamSpec,
    Transport,
    TrioNatsTransport,
    open_nats_transport,
    provision,
    retry_transient,
)
from dagnats_trio.worker import Handler, Worker

from .cpu_floor import cpu_per_round_trip_us

#: Bound on one run of a benchmark; a run that takes longer is a failure, not a figure.
RUN_TIMEOUT_S = 30.0
#: Worker concurrency in benchmarks: every run of the concurrent burst can be in flight at once.
BENCH_WORKER_CONCURRENCY = 64
#: AckWait of the benchmark's worker (nothing crashes here; it only bounds a lost delivery).
BENCH_ACK_WAIT_S = 10.0
#: The floor: a scratch stream of the benchmark, raw publishes of this size, this many of them.
FLOOR_STREAM = "BENCH_FLOOR"
FLOOR_SUBJECT = "bench.floor"
FLOOR_BODY_BYTES = 200
FLOOR_WARMUP_PUBLISHES = 50
FLOOR_PUBLISHES = 500
#: Prefix of run snapshot keys in ``workflow_runs``.
_RUN_KEY_PREFIX = "run."


@attrs.define
class Counts:
    """Round trips of each side, as counted by its transport."""

    engine: int
    worker: int
    client: int

    @property
    def total(self) -> int:
        return self.engine + self.worker + self.client

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.engine + other.engine, self.worker + other.worker, self.client + other.client
        )

    def __sub__(self, other: Counts) -> Counts:
        return Counts(
            self.engine - other.engine, self.worker - other.worker, self.client - other.client
        )


#: Transport calls that the server stores before it answers (durable writes; an atomic batch
#: is one, stored and fsynced whole), each with where its messages are when it sends several
#: stored on their own (``publish_many``, and ``kv_get_and_publish_many`` beside its read): the
#: position of that list among the call's arguments, counted one write per message; None for one.
WRITE_CALLS: dict[str, int | None] = {
    "publish": None,
    "publish_many": 0,
    "kv_get_and_publish_many": 2,
    "publish_batch": None,
    "kv_put": None,
    "kv_create": None,
    "kv_update": None,
    "kv_delete": None,
}


class CountingWrites:
    """A transport that counts the durable writes made through it (``writes``), and passes
    every call on. The benchmark's own view: the product's code sees a transport like any.

    A publish with a msg id that one of the stack's transports (``sent_ids``, shared) has sent
    already is a duplicate inside the server's window (a bench's runs last seconds): the server
    stores nothing and syncs nothing, so it is no write (the engine repeats the first task of
    a start the service dispatched, ``engine.start_dispatched``)."""

    def __init__(self, inner: Transport, sent_ids: set[str]) -> None:
        self._inner = inner
        self._sent_ids = sent_ids
        self.writes = 0

    def _stored(self, msg_id: str | None) -> int:
        if msg_id is None:
            return 1
        if msg_id in self._sent_ids:
            return 0
        self._sent_ids.add(msg_id)
        return 1

    @property
    def inner(self) -> Transport:
        """The transport whose calls are counted."""
        return self._inner

    def __getattr__(self, name: str) -> Any:
        inner = getattr(self._inner, name)
        attr = inner
        if name in WRITE_CALLS:
            many = WRITE_CALLS[name]

            def counted(*args: Any, **kwargs: Any) -> Any:
                # A plain function handing back the inner call's coroutine: no coroutine frame
                # of its own for the product's awaits to pass through.
                if many is not None:
                    self.writes += sum([self._stored(m.msg_id) for m in args[many]])
                else:
                    self.writes += self._stored(kwargs.get("msg_id"))
                return inner(*args, **kwargs)

            attr = counted
        if inspect.ismethod(inner):  # a property (round_trips) is read afresh each time
            # Kept on the wrapper: the next access finds it without calling ``__getattr__`` (the
            # benchmark's CPU per run is the product's, not this wrapper's).
            setattr(self, name, attr)
        return attr


class Stack:
    """Start runs and wait for their end; see the module docstring."""

    def __init__(
        self,
        engine_tp: Transport,
        worker_tp: Transport,
        client_tp: Transport,
        *,
        url: str | None = None,
    ) -> None:
        self.engine_tp = engine_tp
        self.worker_tp = worker_tp
        self.client_tp = client_tp
        self.service = Service(client_tp)
        #: The server's URL (the CPU floor's raw client connects to it), when known.
        self.url = url
        self._done: dict[str, trio.Event] = {}
        self.finished: dict[str, RunOutcome] = {}
        #: Set by :func:`open_stack` once its engine runs.
        self.engine: Engine | None = None
        #: Snapshots the run watcher decoded to learn whether their run finished; the saves
        #: that cannot be a finished run's are not decoded (a count for the tests).
        self.snapshot_decodes = 0

    async def wait_settled(self) -> None:
        """Return once the engine has applied every history event stored so far. A finished
        run's last event is counted only after its run-end removals (``engine._run_end``: the
        active marker's and the tasks' purges, off the client's path) are done, so a count of
        stream writes that starts after this sees no trailing purge of an earlier run."""
        with trio.fail_after(RUN_TIMEOUT_S):
            await self.settled()

    async def settled(self) -> None:
        """:meth:`wait_settled` without a bound of its own (no cancel scope entered: a count of
        them may span it); the caller bounds it."""
        assert self.engine is not None, "wait_settled needs the stack's engine running"
        engine = self.engine
        info = json.loads(
            await self.client_tp.request(f"$JS.API.STREAM.INFO.{HISTORY_STREAM}", b"")
        )
        stored = int(info["state"]["messages"])
        # A start the service dispatched is replayed (its task repeated), not applied.
        await engine.wait_stats(lambda s: s.applied + s.dropped + s.replayed >= stored)

    async def publish_floor_us(self) -> float:
        """The floor every ratio is taken against: the median of sequential raw JetStream
        publishes (200 B, no headers, no fencing) on the worker's connection, in this run."""
        tp = self.worker_tp
        body = b"x" * FLOOR_BODY_BYTES
        # On a cluster under load the scratch stream's leader may not be elected when it is
        # created: its creation and warm-up are retried within the transient deadline, and
        # only the samples after the warm-up are measured.
        await retry_transient(lambda: tp.ensure_stream(StreamSpec(FLOOR_STREAM, (FLOOR_SUBJECT,))))
        for _ in range(FLOOR_WARMUP_PUBLISHES):
            await retry_transient(lambda: tp.publish(FLOOR_SUBJECT, body))
        samples: list[float] = []
        for _ in range(FLOOR_PUBLISHES):
            start = time.perf_counter()
            await tp.publish(FLOOR_SUBJECT, body)
            samples.append((time.perf_counter() - start) * 1e6)
        return statistics.median(samples)

    async def cpu_floor_us(self) -> float:
        """This process's CPU per raw request/response round trip (``bench.cpu_floor``): a
        minimal Trio client's publish with a reply to the floor's stream, on this server."""
        if self.url is None:
            raise RuntimeError("the CPU floor needs the stack's server URL")
        tp = self.worker_tp
        await retry_transient(lambda: tp.ensure_stream(StreamSpec(FLOOR_STREAM, (FLOOR_SUBJECT,))))
        return await cpu_per_round_trip_us(self.url, FLOOR_SUBJECT, b"x" * FLOOR_BODY_BYTES)

    def counts(self) -> Counts:
        return Counts(
            self.engine_tp.round_trips, self.worker_tp.round_trips, self.client_tp.round_trips
        )

    def writes(self) -> Counts:
        """Durable writes of each side so far (see :class:`CountingWrites`)."""
        return Counts(*(_writes_of(tp) for tp in (self.engine_tp, self.worker_tp, self.client_tp)))

    def socket_writes(self) -> int:
        """System calls that wrote to the three sides' sockets so far (the native client counts
        them; a client that does not counts none)."""
        return sum(_socket_writes_of(tp) for tp in (self.engine_tp, self.worker_tp, self.client_tp))

    async def _watch(self, *, task_status: trio.TaskStatus[None]) -> None:
        async with self.client_tp.kv_watch(RUNS_BUCKET, _RUN_KEY_PREFIX) as changes:
            task_status.started()
            async for entry in changes:
                # A save that cannot be a finished run's (told by its bytes) is not decoded at
                # all, and one that may be is decoded once, as the run's outcome (status, error,
                # the steps' outputs; not the definition and outbox a whole snapshot decodes):
                # observing the runs should not cost the process (whose CPU per run is
                # reported) more than a client needs.
                if entry.value is None or not may_be_finished(entry.value):
                    continue
                self.snapshot_decodes += 1
                snap = decode_run_outcome(entry.value)
                if snap.status.finished and snap.run_id not in self.finished:
                    self.finished[snap.run_id] = snap
                    event = self._done.get(snap.run_id)
                    if event is not None:
                        event.set()

    async def run(self, workflow: str, input: Any = None) -> RunOutcome:
        """Start a run and wait (bounded) until its snapshot says it finished."""
        with trio.fail_after(RUN_TIMEOUT_S):
            run_id = await self.service.start_run(workflow, input)
            event = self._done.setdefault(run_id, trio.Event())
            if run_id not in self.finished:
                await event.wait()
            self._done.pop(run_id, None)
            return self.finished.pop(run_id)


@asynccontextmanager
async def open_stack(
    *,
    sync_always: bool,
    handlers: Mapping[str, Handler],
    workflows: list[dict[str, Any]],
    open_transport: Callable[..., AbstractAsyncContextManager[Transport]] = open_nats_transport,
) -> AsyncIterator[Stack]:
    """The stack on one server; ``open_transport`` picks the client (by default
    ``open_nats_transport`` on the default client, the native one)."""
    async with (
        open_nats_server(sync_always=sync_always) as server,
        open_transport(server.url, name="bench-engine") as engine_raw,
        open_transport(server.url, name="bench-worker") as worker_raw,
        open_transport(server.url, name="bench-client") as client_raw,
        trio.open_nursery() as nursery,
    ):
        sent_ids: set[str] = set()
        engine_tp, worker_tp, client_tp = (
            cast(Transport, CountingWrites(tp, sent_ids))
            for tp in (engine_raw, worker_raw, client_raw)
        )
        await provision(client_tp)
        stack = Stack(engine_tp, worker_tp, client_tp, url=server.url)
        for wf in workflows:
            await stack.service.register_workflow(wf)
        engine = Engine(engine_tp, legacy_step_events=False)
        worker = Worker(
            worker_tp,
            handlers,
            concurrency=BENCH_WORKER_CONCURRENCY,
            ack_wait_s=BENCH_ACK_WAIT_S,
        )
        await nursery.start(engine.run)
        stack.engine = engine
        await nursery.start(worker.run)
        await nursery.start(stack._watch)
        yield stack
        nursery.cancel_scope.cancel()


def _writes_of(tp: Transport) -> int:
    return tp.writes if isinstance(tp, CountingWrites) else 0


def _socket_writes_of(tp: Transport) -> int:
    inner = tp.inner if isinstance(tp, CountingWrites) else tp
    return inner.connection.stats().writes if isinstance(inner, TrioNatsTransport) else 0


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), interpolated; for small samples p99 is near the maximum."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]
