"""An engine process that SIGKILLs itself at one call: ``python tests/engine/_engine_victim.py
NATS_URL KILL_AT`` (used by test_engine_kills.py).

``KILL_AT`` names a transport call of the engine's: the process dies the first time the engine
makes it, before it reaches the server. ``kv_update``: the first compare-and-set of a run's
snapshot (the engine has stored the run's definition by reference just before, the save would
be the first to name it). ``purge_subjects``: the removals of a finished run's end (all in one
call), made by the run-end task after the finished save (``engine._run_ends``): its event may
already be acked. The process prints ``ready`` once its engine runs.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Final

import trio

from dagnats_trio.engine import Engine
from dagnats_trio.transport import Transport, open_nats_transport

READY_LINE: Final = "ready"
KV_UPDATE: Final = "kv_update"
PURGE_SUBJECTS: Final = "purge_subjects"
#: Short leases so that what the killed engine held comes back within the test's bounds.
ACK_WAIT_S: Final = 2.0
FETCH_WAIT_S: Final = 0.2


class KillAt:
    """``inner``, except that the first call of ``name`` kills the process."""

    def __init__(self, inner: Transport, name: str) -> None:
        self._inner = inner
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr == self._name:

            async def die(*args: Any, **kwargs: Any) -> Any:
                os.kill(os.getpid(), signal.SIGKILL)

            return die
        return getattr(self._inner, attr)


async def _main(url: str, kill_at: str) -> None:
    async with (
        open_nats_transport(url, name="engine-victim") as transport,
        trio.open_nursery() as nursery,
    ):
        engine = Engine(
            KillAt(transport, kill_at),  # type: ignore[arg-type]
            ack_wait_s=ACK_WAIT_S,
            timer_ack_wait_s=ACK_WAIT_S,
            fetch_wait_s=FETCH_WAIT_S,
            legacy_step_events=False,
        )
        await nursery.start(engine.run)
        print(READY_LINE, flush=True)


if __name__ == "__main__":
    trio.run(_main, sys.argv[1], sys.argv[2])
