"""What ``on_committed`` is told after a commit stores, and the bounded call that tells it.

The inputs service marks the requests a committed segment placed as done from this; it is told,
it does not decide, so its failure is logged and the commit stands.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final, final

import attrs
import trio

from dagnats_trio.protocol import CommitAction, CommitRecord

from ._replay import TaskIdentity

_log = logging.getLogger(__name__)

#: Bound on the ``on_committed`` callback; it is told, it does not decide.
ON_COMMITTED_TIMEOUT_S: Final = 10.0


@final
@attrs.frozen
class CommittedIteration:
    """Told to ``on_committed`` after a commit stores (not for failures): the request ids of the
    inputs the committed segment placed, so the inputs service can mark them done. It may be told
    twice for one commit (a crash before the lifecycle event), never zero times before the event.
    """

    run_id: str
    step_id: str
    iteration: int
    attempt: int
    action: CommitAction
    journal_seq: int
    request_ids: tuple[str, ...]


OnCommitted = Callable[[CommittedIteration], Awaitable[None]]


async def notify_committed(
    on_committed: OnCommitted | None,
    t: TaskIdentity,
    commit: CommitRecord,
    seq: int,
    ids: tuple[str, ...],
) -> None:
    """Tell ``on_committed`` (when there is one) within ``ON_COMMITTED_TIMEOUT_S``."""
    if on_committed is None:
        return
    info = CommittedIteration(t.run_id, t.step_id, t.iteration, t.attempt, commit.action, seq, ids)
    try:
        with trio.fail_after(ON_COMMITTED_TIMEOUT_S):
            await on_committed(info)
    except Exception:
        _log.exception(
            "on_committed failed for %s.%s iteration %d", info.run_id, info.step_id, info.iteration
        )
