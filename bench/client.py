"""Sequential fenced appends: the native Trio client (``dagnats_trio.nats``) against raw nats-py.

The same JetStream publish as the ``append`` section (a 200-byte body with the expected last
subject sequence header, waiting for the stream's ack), three ways: raw nats-py on asyncio (the
floor), ``Connection.request`` on the native client (its own cost, JSON ack parsed), and
``TrioNatsTransport.publish`` on a journal subject (what the journal pays), and the same on
``NatsTransport`` (nats-py's public API through trio-asyncio). All hit one server
in one run; rounds alternate and the best round of each counts, because the machine is shared.
Then the CPU this process spends per scripted agent run, on NatsTransport and on
TrioNatsTransport (engine, worker and client in this process, one server).
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import trio

from dagnats_trio.nats import Connection, open_connection
from dagnats_trio.protocol.layout import journal_subject
from dagnats_trio.server import open_nats_server
from dagnats_trio.testing import AGENT_TASK, ScriptedAgent, agent_workflow, expected_answer
from dagnats_trio.transport import open_nats_py_transport, open_trio_nats_transport, provision

from ._stack import open_stack, percentile
from .append import BODY_BYTES, WARMUP_APPENDS, raw_round, transport_round

APPENDS_PER_ROUND = 2000
QUICK_APPENDS_PER_ROUND = 300
ROUNDS = 3
EXPECTED = "Nats-Expected-Last-Subject-Sequence"
AGENT_WORKFLOW = "bench-client-agent"
AGENT_RUNS = 60
QUICK_AGENT_RUNS = 15
AGENT_WARMUP_RUNS = 5


async def _append(conn: Connection, subject: str, body: bytes, last: int) -> int:
    reply = await conn.request(subject, body, headers={EXPECTED: str(last)})
    ack = json.loads(reply.payload)
    if "error" in ack:
        raise RuntimeError(f"append failed: {ack['error']}")
    seq: int = ack["seq"]
    return seq


async def _native_round(url: str, subject: str, count: int) -> float:
    body = b"x" * BODY_BYTES
    async with open_connection(url, name="bench") as conn:
        last = 0
        for _ in range(WARMUP_APPENDS):
            last = await _append(conn, subject + "w", body, last)
        last = 0
        start = time.perf_counter()
        for _ in range(count):
            last = await _append(conn, subject, body, last)
        return (time.perf_counter() - start) / count * 1e6


async def _measure(count: int) -> tuple[float, float, float, float]:
    async with open_nats_server(sync_always=False) as server:
        run = secrets.token_hex(4)
        stream = f"BENCH_CLIENT_{run}"
        config = {"name": stream, "subjects": [f"benchc.{run}.>"], "storage": "file"}
        async with open_connection(server.url) as conn:
            created = json.loads(
                (
                    await conn.request(
                        f"$JS.API.STREAM.CREATE.{stream}", json.dumps(config).encode()
                    )
                ).payload
            )
            if "error" in created:
                raise RuntimeError(f"stream: {created['error']}")
        async with open_trio_nats_transport(server.url) as transport:
            await provision(transport)
        raw: list[float] = []
        native: list[float] = []
        transported: list[float] = []
        nats_py: list[float] = []
        for i in range(ROUNDS):
            raw.append(
                await trio.to_thread.run_sync(raw_round, server.url, f"benchc.{run}.raw{i}", count)
            )
            native.append(await _native_round(server.url, f"benchc.{run}.native{i}", count))
            transported.append(
                await transport_round(
                    server.url, journal_subject(f"bc{run}{i}", "s"), count, open_trio_nats_transport
                )
            )
            nats_py.append(
                await transport_round(
                    server.url, journal_subject(f"bp{run}{i}", "s"), count, open_nats_py_transport
                )
            )
        return min(raw), min(native), min(transported), min(nats_py)


async def _agent_cpu(open_transport: Any, runs: int) -> tuple[float, float]:
    """(CPU ms of this process per agent run, p50 wall ms per run) over ``runs`` runs."""
    agent = ScriptedAgent()
    answer = expected_answer()
    async with open_stack(
        sync_always=False,
        handlers={AGENT_TASK: agent.turn},
        workflows=[agent_workflow(AGENT_WORKFLOW)],
        open_transport=open_transport,
    ) as stack:
        for _ in range(AGENT_WARMUP_RUNS):
            await stack.run(AGENT_WORKFLOW, {"task": "deploy"})
        times: list[float] = []
        cpu_before = time.process_time()
        for _ in range(runs):
            start = time.perf_counter()
            snap = await stack.run(AGENT_WORKFLOW, {"task": "deploy"})
            times.append((time.perf_counter() - start) * 1000)
            if snap.outputs().get("agent") != answer:
                raise RuntimeError(f"wrong answer (status {snap.status.value})")
        cpu_ms = (time.process_time() - cpu_before) * 1000 / runs
        return cpu_ms, percentile(times, 50)


def run(*, quick: bool = False) -> dict[str, float]:
    """Print the section; ``client_ratio`` is the native client over the raw nats-py floor,
    ``client_transport_ratio`` TrioNatsTransport's fenced append over the same floor,
    ``client_nats_py_transport_ratio`` NatsTransport's."""
    count = QUICK_APPENDS_PER_ROUND if quick else APPENDS_PER_ROUND
    print(f"== client: {count} sequential fenced appends of {BODY_BYTES} B, best of {ROUNDS} "
          "rounds, sync_interval default")  # fmt: skip
    raw, native, transported, nats_py = trio.run(_measure, count)
    ratio = native / raw
    transport_ratio = transported / raw
    nats_py_ratio = nats_py / raw
    print(f"raw nats-py asyncio {raw:7.1f} us/append | native Trio client {native:7.1f} "
          f"us/append | ratio {ratio:.2f}")  # fmt: skip
    print(f"TrioNatsTransport   {transported:7.1f} us/append | ratio {transport_ratio:.2f}")
    print(f"NatsTransport       {nats_py:7.1f} us/append | ratio {nats_py_ratio:.2f} "
          "(nats-py's public API)")  # fmt: skip
    runs = QUICK_AGENT_RUNS if quick else AGENT_RUNS
    cpu: dict[str, float] = {}
    for label, key, opener in (
        ("NatsTransport (nats-py)", "nats_py", open_nats_py_transport),
        ("TrioNatsTransport", "trio", open_trio_nats_transport),
    ):
        cpu_ms, p50 = trio.run(_agent_cpu, opener, runs)
        cpu[key] = cpu_ms
        print(f"agent run on {label:>23}: {cpu_ms:5.1f} ms CPU per run, p50 {p50:.1f} ms "
              f"({runs} sequential runs)")  # fmt: skip
    return {
        "client_agent_cpu_ms_nats_py": round(cpu["nats_py"], 2),
        "client_agent_cpu_ms_trio": round(cpu["trio"], 2),
        "client_ratio": round(ratio, 2),
        "client_transport_ratio": round(transport_ratio, 2),
        "client_raw_us": round(raw, 1),
        "client_native_us": round(native, 1),
        "client_transport_us": round(transported, 1),
        "client_nats_py_transport_ratio": round(nats_py_ratio, 2),
        "client_nats_py_transport_us": round(nats_py, 1),
    }


if __name__ == "__main__":
    run()
