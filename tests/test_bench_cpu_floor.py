"""``bench.cpu_floor`` (issue 12 item 3): the CPU a raw Trio round trip costs, and the line the
agent section and ``just bench --profile`` print against it.

No timing is asserted (the machine's load moves it): the floor's round trips reach the server
and are answered (the stream stores each one), the CPU measured is positive, and the printed
ratio is the run's CPU over the floor times the round trips.
"""

from __future__ import annotations

import json

import pytest

from bench.cpu_floor import cpu_floor_line, cpu_per_round_trip_us
from dagnats_trio.transport import StreamSpec, TrioNatsTransport

STREAM = "BENCH_CPU_FLOOR_TEST"
SUBJECT = "bench.cpu-floor-test"
ROUND_TRIPS = 40
WARMUP = 5


async def _messages(tp: TrioNatsTransport) -> int:
    info = json.loads(await tp.request(f"$JS.API.STREAM.INFO.{STREAM}", b""))
    return int(info["state"]["messages"])


async def test_each_round_trip_is_a_stored_publish_and_its_cpu_is_positive(
    nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    await trio_transport.ensure_stream(StreamSpec(STREAM, (SUBJECT,)))
    before = await _messages(trio_transport)
    us = await cpu_per_round_trip_us(
        nats_url, SUBJECT, b"x" * 200, round_trips=ROUND_TRIPS, warmup=WARMUP
    )
    print(f"cpu per raw round trip: {us:.1f} us")
    assert us > 0
    # Every PUB was stored and its ack read before the next was sent: one message each.
    assert await _messages(trio_transport) - before == ROUND_TRIPS + WARMUP


def test_the_line_states_the_floor_per_run_and_the_ratio() -> None:
    line, ratio = cpu_floor_line(cpu_ms=12.4, floor_us=100.0, round_trips=31.0)
    assert ratio == pytest.approx(12.4 / 3.1)
    assert "CPU floor per run 3.10 ms" in line
    assert "100.0 us of CPU, x 31.0 round trips" in line
    assert line.endswith("= 4.0x the floor")
    # A run slower than its floor reads above 1, one at its floor 1.
    assert cpu_floor_line(cpu_ms=3.1, floor_us=100.0, round_trips=31.0)[1] == pytest.approx(1.0)
    assert cpu_floor_line(cpu_ms=1.0, floor_us=0.0, round_trips=31.0)[1] == float("inf")
