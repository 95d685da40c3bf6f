"""A client process whose start is SIGKILLed between two of its writes:
``python tests/engine/_start_victim.py NATS_URL WORKFLOW RUN_ID KEY KILL_AT`` (used by
test_start_kills.py).

The process reads the workflow first, so its start takes the session's early path (the run
indexed, or its idempotency key claimed, while the definition is read: ``api.service``), then
starts a run with id ``RUN_ID`` (``KEY`` ``-`` for none) and dies the first time the start
makes the call ``KILL_AT`` names, before it reaches the server: ``snapshot`` (the create of the
run's first snapshot) or ``started`` (the publish of its ``workflow.started``). It exits 3 if the
start ends without reaching that call.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Final

import trio

from dagnats_trio._env import RuntimeEnv
from dagnats_trio.api import Service
from dagnats_trio.protocol import layout
from dagnats_trio.transport import Transport, open_nats_transport

SNAPSHOT: Final = "snapshot"
STARTED: Final = "started"
NO_KEY: Final = "-"
EXIT_NOT_KILLED: Final = 3


class KillAt:
    """``inner``, except that the call ``(method, first argument)`` kills the process."""

    def __init__(self, inner: Transport, method: str, target: str) -> None:
        self._inner = inner
        self._method = method
        self._target = target

    def __getattr__(self, attr: str) -> Any:
        call = getattr(self._inner, attr)
        if attr != self._method:
            return call

        async def maybe_die(*args: Any, **kwargs: Any) -> Any:
            if self._target in args[:2]:
                os.kill(os.getpid(), signal.SIGKILL)
            return await call(*args, **kwargs)

        return maybe_die


async def _main(url: str, workflow: str, run_id: str, key: str, kill_at: str) -> None:
    if kill_at == SNAPSHOT:
        method, target = "kv_create", layout.run_key(run_id)
    else:
        method, target = "publish", layout.history_subject(run_id)
    async with open_nats_transport(url, name="start-victim") as transport:
        env = RuntimeEnv(new_id=lambda: run_id)
        service = Service(KillAt(transport, method, target), env)  # type: ignore[arg-type]
        await service.get_workflow(workflow)
        await service.start_run(workflow, {"n": 1}, None if key == NO_KEY else key)
    sys.exit(EXIT_NOT_KILLED)


if __name__ == "__main__":
    trio.run(_main, *sys.argv[1:6])
