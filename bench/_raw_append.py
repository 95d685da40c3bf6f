"""The floor: fenced appends with raw nats-py on plain asyncio, in a process of its own.

Kept apart from trio-asyncio (which installs its own asyncio policy on import), so this is what
an asyncio program would see. Prints one line: microseconds per append.
"""

from __future__ import annotations

import asyncio
import sys
import time

import nats

EXPECTED = "Nats-Expected-Last-Subject-Sequence"
REQUEST_TIMEOUT_S = 5.0


async def appends(url: str, subject: str, count: int, body: bytes) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=REQUEST_TIMEOUT_S)
    try:
        last = 0
        start = time.perf_counter()
        for _ in range(count):
            ack = await js.publish(subject, body, headers={EXPECTED: str(last)})
            last = ack.seq
        return (time.perf_counter() - start) / count * 1e6
    finally:
        await nc.close()


def main() -> None:
    url, subject, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(f"{asyncio.run(appends(url, subject, count, b'x' * size)):.1f}")


if __name__ == "__main__":
    main()
