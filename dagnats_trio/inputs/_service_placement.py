"""The inputs service's reads and compare-and-sets for placement (``tc.place_inputs`` through
:mod:`.placement`): the candidates of a step, claim and adopt, the journal's placements, and
the index upkeep. A base of :class:`.service.InputsService`, which holds the transport, clock
and store they use.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable

from dagnats_trio._env import RuntimeEnv
from dagnats_trio.protocol import layout, to_json
from dagnats_trio.transport import RevisionMismatch, Transport

from . import _journal
from ._settlement import JournalPlacements
from ._store import StoredSubmission, SubmissionStore, submission_key
from .submission import Mode, Submission, to_adopted, to_placed


class _PlacementOps:
    """The inputs service's placement side (see :class:`.service.InputsService`)."""

    #: Set by :meth:`.service.InputsService.__init__`: the transport, the clock, the records.
    _t: Transport
    _env: RuntimeEnv
    _store: SubmissionStore

    # --- for placement ---------------------------------------------------------------------

    async def placement_candidates(
        self, run_id: str, step_id: str, mode: Mode
    ) -> builtins.list[StoredSubmission]:
        """Indexed submissions of ``mode``, in submission order, whatever their status now."""
        index = await self._store.read_index(run_id, step_id)
        if index is None:
            return []
        found: builtins.list[StoredSubmission] = []
        for entry in index.queued:
            if entry.mode is not mode:
                continue
            stored = await self._store.read(submission_key(run_id, step_id, entry.request_id))
            if stored is not None:
                found.append(stored)
        return found

    async def claim(self, stored: StoredSubmission, iteration: int) -> StoredSubmission | None:
        """queued -> placed by compare-and-set at the revision read.

        None when the submission changed meanwhile (the caller re-reads and decides again).
        """
        new = to_placed(stored.submission, iteration)
        key = self._store.key_of(new)
        try:
            revision = await self._t.kv_update(
                layout.INPUTS_BUCKET, key, to_json(new), stored.revision
            )
        except RevisionMismatch:
            return None
        return StoredSubmission(new, revision)

    async def adopt(self, stored: StoredSubmission, iteration: int) -> StoredSubmission | None:
        """placed (by an earlier iteration, never recorded) -> placed by ``iteration``, by
        compare-and-set; None when the submission changed meanwhile."""
        new = to_adopted(stored.submission, iteration)
        try:
            revision = await self._t.kv_update(
                layout.INPUTS_BUCKET, self._store.key_of(new), to_json(new), stored.revision
            )
        except RevisionMismatch:
            return None
        return StoredSubmission(new, revision)

    async def journal_placements(self, run_id: str, step_id: str) -> JournalPlacements:
        """What the step's journal records about placements (a full read of its journal: only
        the repair of a lost claim and the settlement of a finished step need it)."""
        return await _journal.read_placements(self._t, run_id, step_id)

    async def reread(self, sub: Submission) -> StoredSubmission | None:
        return await self._store.read(self._store.key_of(sub))

    async def drop_from_index(self, run_id: str, step_id: str, request_ids: Iterable[str]) -> None:
        """Remove entries whose submission left ``queued`` (best effort: the record decides)."""
        await self._store.drop_from_index(run_id, step_id, request_ids)
