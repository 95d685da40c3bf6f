"""Sequential fenced appends: NatsTransport (Trio over trio-asyncio) against raw nats-py.

Each append is one journal-style publish: a 200-byte body with the expected last subject
sequence header, waiting for the stream's ack. Both paths hit the same server in the same run;
rounds alternate and the best round of each counts, because the machine is shared.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from typing import Any

import trio

from dagnats_trio.protocol.layout import journal_subject
from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import open_nats_py_transport, provision

BODY_BYTES = 200
APPENDS_PER_ROUND = 2000
WARMUP_APPENDS = 200
ROUNDS = 3
#: Bound on one raw round (a subprocess).
RAW_ROUND_TIMEOUT_S = 120.0


async def transport_round(
    url: str, subject: str, count: int, opener: Any = open_nats_py_transport
) -> float:
    """Microseconds per fenced append through a transport that ``opener(url, name=...)`` opens
    (``bench client`` times the other transports with it)."""
    body = b"x" * BODY_BYTES
    async with opener(url, name="bench") as transport:
        last = 0
        for _ in range(WARMUP_APPENDS):
            last = await transport.publish(subject + "w", body, expected_last_subject_seq=last)
        last = 0
        start = time.perf_counter()
        for _ in range(count):
            last = await transport.publish(subject, body, expected_last_subject_seq=last)
        return (time.perf_counter() - start) / count * 1e6


def raw_round(url: str, subject: str, count: int) -> float:
    """Microseconds per fenced append from raw nats-py on asyncio (a subprocess): the floor."""
    subprocess.run(  # warm the server side the same way
        [sys.executable, "-m", "bench._raw_append", url, subject + "w", str(WARMUP_APPENDS),
         str(BODY_BYTES)],
        check=True, capture_output=True, timeout=RAW_ROUND_TIMEOUT_S,
    )  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "bench._raw_append", url, subject, str(count), str(BODY_BYTES)],
        check=True, capture_output=True, text=True, timeout=RAW_ROUND_TIMEOUT_S,
    )  # fmt: skip
    return float(out.stdout.strip())


async def _measure(sync_always: bool) -> tuple[float, float]:
    async with open_nats_server(sync_always=sync_always) as server:
        async with open_nats_py_transport(server.url) as transport:
            await provision(transport)
        raw: list[float] = []
        ours: list[float] = []
        run = secrets.token_hex(4)
        for i in range(ROUNDS):
            raw.append(
                await trio.to_thread.run_sync(
                    raw_round, server.url, journal_subject(f"raw{run}{i}", "s"), APPENDS_PER_ROUND
                )
            )
            ours.append(
                await transport_round(
                    server.url, journal_subject(f"trio{run}{i}", "s"), APPENDS_PER_ROUND
                )
            )
        return min(raw), min(ours)


def run() -> dict[str, float]:
    """Print the section and return its figures; ``append_ratio`` is on the default server."""
    print(f"== append: {APPENDS_PER_ROUND} sequential fenced appends of {BODY_BYTES} B, "
          f"best of {ROUNDS} rounds")  # fmt: skip
    figures: dict[str, float] = {}
    for sync_always, label in ((False, "sync_interval default"), (True, "sync_interval always")):
        raw, ours = trio.run(_measure, sync_always)
        ratio = ours / raw
        print(f"{label:>22}: raw nats-py asyncio {raw:7.1f} us/append | "
              f"NatsTransport (trio) {ours:7.1f} us/append | ratio {ratio:.2f}")  # fmt: skip
        key = "append_ratio_fsync" if sync_always else "append_ratio"
        figures[key] = round(ratio, 2)
        figures[f"{key}_raw_us"] = round(raw, 1)
        figures[f"{key}_trio_us"] = round(ours, 1)
    print(f"append_ratio_fsync={figures['append_ratio_fsync']}")
    print(f"append_ratio={figures['append_ratio']}")
    return figures


if __name__ == "__main__":
    run()
