"""A client process whose start is SIGKILLed between two of its writes:
``python tests/engine/_start_victim.py NATS_URL WORKFLOW RUN_ID KEY KILL_AT`` (used by
test_start_kills.py).

The process reads the workflow first, so its start takes the session's early path (the run
indexed, or its idempotency key claimed, while the definition is read: ``api.service``) and
dispatches the first step itself (``engine.start_dispatched``), then starts a run with id
``RUN_ID`` (``KEY`` ``-`` for none) and dies where ``KILL_AT`` says: ``snapshot`` (before the
create of the run's first snapshot), ``dispatch`` (the snapshot holding the dispatch created,
before its task and ``workflow.started`` are sent), ``task`` (after the task is stored, before
the event: the two are sent at once, so a process that dies while writing them can leave that)
or ``announced`` (after both are stored, before the start returns). ``started`` takes the
engine's path instead (the workflow not read before: the snapshot is created undispatched) and
dies before that start's ``workflow.started`` is sent. It exits 3 if the start ends without
reaching that point.
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
from dagnats_trio.transport import PublishMsg, Transport, open_nats_transport

SNAPSHOT: Final = "snapshot"
DISPATCH: Final = "dispatch"
TASK: Final = "task"
ANNOUNCED: Final = "announced"
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
                _die()
            return await call(*args, **kwargs)

        return maybe_die


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillAtAnnounce:
    """``inner``, except that the start's ``publish_many`` (its tasks and ``workflow.started``)
    kills the process before it sends them (``dispatch``), after storing only the tasks
    (``task``), or after storing them all (``announced``)."""

    def __init__(self, inner: Transport, run_id: str, kill_at: str) -> None:
        self._inner = inner
        self._history = layout.history_subject(run_id)
        self._kill_at = kill_at

    def __getattr__(self, attr: str) -> Any:
        call = getattr(self._inner, attr)
        if attr != "publish_many":
            return call

        async def maybe_die(msgs: list[PublishMsg]) -> Any:
            if all(m.subject != self._history for m in msgs):
                return await call(msgs)
            if self._kill_at == DISPATCH:
                _die()
            if self._kill_at == TASK:
                await call([m for m in msgs if m.subject != self._history])
                _die()
            await call(msgs)
            _die()

        return maybe_die


async def _main(url: str, workflow: str, run_id: str, key: str, kill_at: str) -> None:
    async with open_nats_transport(url, name="start-victim") as transport:
        env = RuntimeEnv(new_id=lambda: run_id)
        killing: Any
        if kill_at == SNAPSHOT:
            killing = KillAt(transport, "kv_create", layout.run_key(run_id))
        elif kill_at == STARTED:
            killing = KillAt(transport, "publish", layout.history_subject(run_id))
        else:
            killing = KillAtAnnounce(transport, run_id, kill_at)
        service = Service(killing, env)
        if kill_at != STARTED:
            await service.get_workflow(workflow)
        await service.start_run(workflow, {"n": 1}, None if key == NO_KEY else key)
    sys.exit(EXIT_NOT_KILLED)


if __name__ == "__main__":
    trio.run(_main, *sys.argv[1:6])
