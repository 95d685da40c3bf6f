"""A handler that claims its journal and then kills its own process, as a crash mid-iteration
would: loaded by ``dagnats worker --restart-limit N _crashing:handlers`` in the restart-limit
tests. Kept out of ``_workers`` so a ``dev --worker _workers:handlers`` never runs it."""

from __future__ import annotations

import os
import signal

from dagnats_trio.worker import Handler, TaskContext


async def claim_then_die(tc: TaskContext) -> None:
    await tc.journal()  # the claim is stored when this returns
    os.kill(os.getpid(), signal.SIGKILL)


handlers: dict[str, Handler] = {"cli_crash": claim_then_die}
