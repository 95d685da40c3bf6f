"""The marks a worker leaves to say it polls its task types (``worker_polls``, one key a type).

Why: a run whose task type no worker serves stays ``running`` with nothing to show for it; the
API reads these marks and says so on the run (``api._unserved``). The marks are written by a
loop of their own every :data:`POLL_MARK_INTERVAL_S`, never by the fetch loop, so polling for
tasks costs no extra round trip. A worker runs its pull loops for as long as it runs, so a mark
is refreshed exactly while this worker polls the type.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

import trio

from dagnats_trio._env import RuntimeEnv
from dagnats_trio.protocol import PollMark, encode_poll_mark
from dagnats_trio.protocol.layout import WORKER_POLLS_BUCKET, worker_poll_key
from dagnats_trio.transport import Closed, NotProvisioned, Transport, TransportError

_log = logging.getLogger(__name__)

#: How often a running worker refreshes its marks (one KV put per task type each time); well
#: inside the API's :data:`dagnats_trio.api.UNSERVED_AFTER_S`.
POLL_MARK_INTERVAL_S: Final = 5.0


async def mark_polls(
    transport: Transport,
    task_types: Iterable[str],
    worker_id: str,
    env: RuntimeEnv,
    interval_s: float = POLL_MARK_INTERVAL_S,
) -> None:
    """Refresh a mark for each of ``task_types`` every ``interval_s`` until cancelled. A failed
    write is logged and tried again at the next round: marks are a hint, never a reason to stop
    a worker (a store provisioned before the bucket existed has none: said once)."""
    types = sorted(set(task_types))
    said_missing = False
    while True:
        for task_type in types:
            mark = PollMark(task_type=task_type, worker_id=worker_id, at_ms=env.wall_ms())
            try:
                await transport.kv_put(
                    WORKER_POLLS_BUCKET, worker_poll_key(task_type), encode_poll_mark(mark)
                )
            except Closed:
                raise
            except NotProvisioned:
                if not said_missing:
                    said_missing = True
                    _log.warning(
                        "bucket %s is missing (run `dagnats serve` or provision once): "
                        "runs cannot tell whether a worker serves their task types",
                        WORKER_POLLS_BUCKET,
                    )
            except TransportError as exc:
                _log.debug("poll mark for %s not written: %s", task_type, exc)
        await trio.sleep(interval_s)


__all__ = ["POLL_MARK_INTERVAL_S", "mark_polls"]
