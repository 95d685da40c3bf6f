"""The inputs service's settlement: a finished step settles its submissions (from its
journal), and a committed iteration marks the inputs it placed done, retried with backoff for a
worker's or the bridge's commit hook. Part of :class:`.service.InputsService`.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Final

import trio

from dagnats_trio.protocol import layout
from dagnats_trio.transport import TransportError

from ._service_placement import _PlacementOps
from ._settlement import JournalPlacements, settle_finished
from ._store import StoredSubmission, step_prefix, submission_key
from .errors import ContentionError
from .submission import Submission, SubmissionStatus, to_done

#: How long :meth:`InputsService.mark_committed` keeps retrying a failing marking; under the
#: journal's bound on its ``on_committed`` hook (10 s), so the lifecycle event is not held longer.
MARK_COMMITTED_BUDGET_S: Final = 8.0
#: First pause between two markings, doubled after each failure up to the next bound.
MARK_COMMITTED_BACKOFF_S: Final = 0.1
MARK_COMMITTED_BACKOFF_MAX_S: Final = 1.0


class _SettlementOps(_PlacementOps):
    """The inputs service's settlement side (see :class:`.service.InputsService`)."""

    async def settle_step(self, run_id: str, step_id: str) -> None:
        """The step reached a final state (completed, failed, cancelled, timed out): close it to
        new inputs and settle every submission of it that is not settled yet, from its journal.

        A queued input becomes unanswered; a placed one becomes done when the iteration that
        placed it committed (the journal says so, whether or not the worker's own marking
        arrived), else unanswered (see ``_settlement``). A holder of a cancelled or timed out
        step may still be running and commit afterwards; the settlement is final, and the
        journal still places an input at most once. Idempotent: a repeat after a crash settles
        what is left, so the engine may replay it.
        """
        listed = await self._store.index_close(run_id, step_id)
        keys = set(await self._t.kv_keys(layout.INPUTS_BUCKET, step_prefix(run_id, step_id)))
        keys.update(submission_key(run_id, step_id, e.request_id) for e in listed)
        open_subs: builtins.list[StoredSubmission] = []
        for key in sorted(keys):
            stored = await self._store.read(key)
            # None: a submission in flight; it sees the closed index and settles itself.
            if stored is not None and not stored.submission.status.settled:
                open_subs.append(stored)
        if open_subs:
            journal = JournalPlacements()
            if any(s.submission.status is SubmissionStatus.PLACED for s in open_subs):
                journal = await self.journal_placements(run_id, step_id)
            now = self._env.wall_ms()
            for stored in open_subs:
                await self._store.transition(stored, lambda s: settle_finished(s, journal, now))
        await self.drop_from_index(run_id, step_id, [e.request_id for e in listed])

    async def mark_done(
        self, run_id: str, step_id: str, request_ids: Iterable[str]
    ) -> builtins.list[Submission]:
        """The iteration that placed these inputs committed: placed -> done.

        Ids that are already done, unknown (expired) or not placed are skipped, so a repeated
        call after a crash is harmless. Returns the submissions this call moved.
        """
        moved: builtins.list[Submission] = []
        now = self._env.wall_ms()
        for request_id in request_ids:
            stored = await self._store.read(submission_key(run_id, step_id, request_id))
            if stored is None or stored.submission.status is not SubmissionStatus.PLACED:
                continue
            done = await self._store.transition(stored, lambda s: to_done(s, now))
            if done is not None and done.submission.status is SubmissionStatus.DONE:
                moved.append(done.submission)
        return moved

    async def mark_committed(
        self, run_id: str, step_id: str, request_ids: Iterable[str]
    ) -> builtins.list[Submission]:
        """:meth:`mark_done` for the commit hook of a worker or the bridge: a failure (NATS
        unavailable for a moment, contention) is retried with backoff for up to
        :data:`MARK_COMMITTED_BUDGET_S`, so a done is not lost to a transient error and a client
        waiting on the input sees it now, not when the step finishes (the settlement of the
        finished step would still make it done, from the journal). Raises the last error when
        the budget runs out."""
        ids = tuple(request_ids)
        delay = MARK_COMMITTED_BACKOFF_S
        last: Exception = TransportError(
            f"marking {len(ids)} inputs done took over {MARK_COMMITTED_BUDGET_S} s"
        )
        with trio.move_on_after(MARK_COMMITTED_BUDGET_S):
            while True:
                try:
                    return await self.mark_done(run_id, step_id, ids)
                except (TransportError, ContentionError) as exc:
                    last = exc
                await trio.sleep(delay)
                delay = min(2 * delay, MARK_COMMITTED_BACKOFF_MAX_S)
        raise last
