"""The one inputs service under REST, the NATS endpoints and ``tc.place_inputs``.

Storage is the KV bucket ``inputs``, which has no bucket-wide TTL:

- ``{run}.{step}.{token}``: the :class:`Submission`, the truth about its state, where ``token`` is
  the request id encoded as one key-safe token (:func:`~dagnats_trio.protocol.request_id_token`:
  the id itself when it is ``[A-Za-z0-9_-]``, else ``=`` + base64url of its UTF-8);
- ``{run}.{step}``: the step's :class:`~._index.StepIndex` (order counter, queued ids, closed).

A queued or placed submission and an open index carry no TTL: they live as long as their step,
however long it waits. The write that settles a submission (done, unanswered, withdrawn) and
every write of a closed index carry a per-message TTL of seven days
(:data:`~dagnats_trio.protocol.layout.INPUTS_DEDUPE_TTL_S`): the dedupe window of a request id
runs from the moment its submission finished, and then the key goes away by itself.

Every state change is a compare-and-set on the key's revision, so a withdrawal, a placement and
the settlement of a finished step race safely: exactly one of them moves a queued submission.

Round trips (each KV or stream call is one):

- new submission: 7 (dedupe get, snapshot get, index get + CAS, create, index re-read, publish
  of ``input.submitted``); a repeat: 1 (2 while still queued: the wake-up is published again,
  deduplicated by message id, in case the first publish was lost);
- ``has_queued``: 1 when nothing is indexed, else 1 + one get per entry up to the first queued
  one (usually 2);
- listing the queued inputs of a step: 1 + one get per indexed entry (settled submissions are
  not indexed, so this does not grow with history);
- ``withdraw``: 4 (get, CAS, index get + CAS); ``settle_step``: 4 + a key listing + 2 per
  unsettled submission (plus one read of the journal when one is placed).

The records' keys and compare-and-set loops are :mod:`._store`; the checks on what a caller
gives, :mod:`._checks`; the settlement of a finished step and the marking of committed inputs,
:mod:`._service_settlement`; the reads and compare-and-sets for placement,
:mod:`._service_placement`.
"""

from __future__ import annotations

import builtins
from typing import Final, final

import trio

from dagnats_trio._env import DEFAULT_ENV, RuntimeEnv
from dagnats_trio.protocol import (
    InputSubmitted,
    JsonValue,
    encode_event,
    layout,
    request_id_token,
    to_json,
)
from dagnats_trio.transport import (
    KeyExists,
    RevisionMismatch,
    Transport,
)

from ._checks import MAX_CONTENT_BYTES, check_content, check_ids, parse_mode
from ._service_settlement import (
    MARK_COMMITTED_BACKOFF_MAX_S,
    MARK_COMMITTED_BACKOFF_S,
    MARK_COMMITTED_BUDGET_S,
    _SettlementOps,
)
from ._snapshot import FINISHED_STEP_STATUSES, decode_run_view
from ._store import (
    MAX_CAS_ATTEMPTS,
    StoredSubmission,
    SubmissionStore,
    decode_submission,
    index_key,
    step_prefix,
    submission_key,
    ttl_of,
)
from .errors import (
    BadRequestError,
    ConflictError,
    ContentionError,
    NotFoundError,
)
from .submission import (
    InvalidTransition,
    Mode,
    Submission,
    SubmissionStatus,
    new_submission,
    to_unanswered,
    to_withdrawn,
)

__all__ = [
    "MARK_COMMITTED_BACKOFF_MAX_S",
    "MARK_COMMITTED_BACKOFF_S",
    "MARK_COMMITTED_BUDGET_S",
    "MAX_CAS_ATTEMPTS",
    "MAX_CONTENT_BYTES",
    "MAX_GET_WAIT_S",
    "InputsService",
    "StoredSubmission",
    "check_content",
    "check_ids",
    "index_key",
    "parse_mode",
    "step_prefix",
    "submission_key",
]

#: Longest a ``get`` may wait for a change, whatever the caller asks.
MAX_GET_WAIT_S: Final = 60.0


@final
class InputsService(_SettlementOps):
    """Submit, read, withdraw and settle inputs; also the engine's ``InputsHooks``.

    Settlement and marking are in :class:`._service_settlement._SettlementOps`, the reads and
    compare-and-sets for placement in :class:`._service_placement._PlacementOps` (its bases).
    """

    def __init__(self, transport: Transport, env: RuntimeEnv = DEFAULT_ENV) -> None:
        self._t = transport
        self._env = env
        self._store = SubmissionStore(transport)

    # --- public operations -----------------------------------------------------------------

    async def submit(
        self,
        run_id: str,
        step_id: str,
        request_id: str,
        mode: Mode | str,
        content: JsonValue,
    ) -> tuple[Submission, bool]:
        """Queue an input; ``created`` is False for a repeat, which returns the original."""
        check_ids(run_id, step_id, request_id)
        mode = parse_mode(mode)
        check_content(content)
        key = submission_key(run_id, step_id, request_id)
        existing = await self._store.read(key)
        if existing is not None:
            if existing.submission.status is SubmissionStatus.QUEUED:
                await self._announce(existing.submission)
            return existing.submission, False
        await self._check_step_open(run_id, step_id)
        # The index entry comes first: a crash before the record is written leaves an entry
        # without a record (skipped by readers, kept in place for a retry of the same id), never
        # a queued record that nothing lists.
        order = await self._store.index_add(run_id, step_id, request_id, mode)
        sub = new_submission(
            request_id=request_id,
            run_id=run_id,
            step_id=step_id,
            mode=mode,
            content=content,
            order=order,
            now_ms=self._env.wall_ms(),
        )
        try:
            revision = await self._t.kv_create(layout.INPUTS_BUCKET, key, to_json(sub))
        except KeyExists:
            winner = await self._store.read(key)
            if winner is None:
                raise ContentionError(
                    f"input {request_id!r} changed while being submitted"
                ) from None
            return winner.submission, False
        # Settlement closes the index, then settles the records it listed; a record written after
        # that read would stay queued on a finished step, so look at the index again and settle
        # our own record if the step closed meanwhile.
        index = await self._store.read_index(run_id, step_id)
        if index is not None and index.closed:
            settled = await self._store.transition(
                StoredSubmission(sub, revision), lambda s: to_unanswered(s, self._env.wall_ms())
            )
            return (settled.submission if settled else sub), True
        await self._announce(sub)
        return sub, True

    async def get(
        self,
        run_id: str,
        step_id: str,
        request_id: str,
        wait_s: float | None = None,
        *,
        since: SubmissionStatus | None = None,
    ) -> Submission:
        """The submission; with ``wait_s``, wait (at most :data:`MAX_GET_WAIT_S`) until its
        status differs from ``since`` (default: the status it has now) and return it then, or
        return it unchanged at the deadline."""
        check_ids(run_id, step_id, request_id)
        key = submission_key(run_id, step_id, request_id)
        if wait_s is None or wait_s == 0:
            return (await self._store.require(key, request_id)).submission
        if wait_s < 0:
            raise BadRequestError(f"wait must be >= 0 seconds, got {wait_s}", code="invalid_wait")
        async with self._t.kv_watch(layout.INPUTS_BUCKET, step_prefix(run_id, step_id)) as changes:
            current = (await self._store.require(key, request_id)).submission
            baseline = since if since is not None else current.status
            if current.status is not baseline or current.status.settled:
                return current
            with trio.move_on_after(min(wait_s, MAX_GET_WAIT_S)):
                async for entry in changes:
                    if entry.key != key or entry.value is None:
                        continue
                    current = decode_submission(entry.value)
                    if current.status is not baseline:
                        return current
            return current

    async def withdraw(self, run_id: str, step_id: str, request_id: str) -> Submission:
        """Withdraw a queued input. Winning the compare-and-set is final: no placement follows.

        Withdrawing an already withdrawn input returns it again (a retried DELETE).
        """
        check_ids(run_id, step_id, request_id)
        key = submission_key(run_id, step_id, request_id)
        for _ in range(MAX_CAS_ATTEMPTS):
            stored = await self._store.require(key, request_id)
            sub = stored.submission
            if sub.status is SubmissionStatus.WITHDRAWN:
                return sub
            try:
                new = to_withdrawn(sub, self._env.wall_ms())
            except InvalidTransition:
                raise ConflictError(
                    f"input {request_id!r} is {sub.status.value} and can no longer be withdrawn",
                    code="not_withdrawable",
                ) from None
            try:
                await self._t.kv_update(
                    layout.INPUTS_BUCKET, key, to_json(new), stored.revision, ttl_s=ttl_of(new)
                )
            except RevisionMismatch:
                continue
            await self.drop_from_index(run_id, step_id, [request_id])
            return new
        raise ContentionError(f"input {request_id!r} kept changing; try again")

    async def has_queued(self, run_id: str, step_id: str) -> bool:
        """Any input of either mode queued for the step (the engine's wait check)."""
        index = await self._store.read_index(run_id, step_id)
        if index is None:
            return False
        for entry in index.queued:
            stored = await self._store.read(submission_key(run_id, step_id, entry.request_id))
            if stored is not None and stored.submission.status is SubmissionStatus.QUEUED:
                return True
        return False

    # --- listing -----------------------------------------------------------------------------

    async def list(self, run_id: str, step_id: str) -> builtins.list[Submission]:
        """Every submission of the step, unfinished or still in its dedupe window, in order.

        Costs one key listing plus one get per submission; for the queued ones alone, the index
        is cheaper (see :meth:`placement_candidates`).
        """
        check_ids(run_id, step_id)
        keys = await self._t.kv_keys(layout.INPUTS_BUCKET, step_prefix(run_id, step_id))
        subs: builtins.list[Submission] = []
        for key in keys:
            stored = await self._store.read(key)
            if stored is not None:
                subs.append(stored.submission)
        subs.sort(key=lambda s: s.order)
        return subs

    # --- internals ---------------------------------------------------------------------------

    async def _announce(self, sub: Submission) -> None:
        """Wake the step if it waits for input (deduplicated per request id by the stream)."""
        event = InputSubmitted(run_id=sub.run_id, step_id=sub.step_id, request_id=sub.request_id)
        await self._t.publish(
            layout.history_subject(sub.run_id),
            encode_event(event),
            msg_id=f"input.submitted.{sub.run_id}.{sub.step_id}.{request_id_token(sub.request_id)}",
        )

    async def _check_step_open(self, run_id: str, step_id: str) -> None:
        entry = await self._t.kv_get(layout.RUNS_BUCKET, layout.run_key(run_id))
        if entry is None or entry.value is None:
            raise NotFoundError(f"no run {run_id!r}", code="run_not_found")
        run = decode_run_view(entry.value)
        step = run.steps.get(step_id)
        if step is None:
            raise NotFoundError(f"run {run_id!r} has no step {step_id!r}", code="step_not_found")
        if step.status in FINISHED_STEP_STATUSES:
            raise ConflictError(
                f"step {step_id!r} has finished ({step.status}) and takes no more inputs",
                code="step_finished",
            )
        if run.status.finished:
            raise ConflictError(
                f"run {run_id!r} has finished ({run.status.value}) and takes no more inputs",
                code="run_finished",
            )
