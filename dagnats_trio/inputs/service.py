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
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from typing import final

import attrs
import trio

from dagnats_trio._env import DEFAULT_ENV, RuntimeEnv
from dagnats_trio.protocol import (
    InputSubmitted,
    InvalidId,
    JsonPolicyError,
    JsonValue,
    check_id,
    check_request_id,
    encode_event,
    encode_json,
    from_json,
    layout,
    request_id_token,
    to_json,
)
from dagnats_trio.transport import (
    KeyExists,
    RevisionMismatch,
    Transport,
    TransportError,
)

from . import _index, _journal
from ._index import IndexEntry, StepIndex
from ._settlement import JournalPlacements, settle_finished
from ._snapshot import FINISHED_STEP_STATUSES, decode_run_view
from .errors import (
    BadRequestError,
    ConflictError,
    ContentionError,
    ContentTooLargeError,
    NotFoundError,
)
from .submission import (
    InvalidTransition,
    Mode,
    Submission,
    SubmissionStatus,
    new_submission,
    to_adopted,
    to_done,
    to_placed,
    to_unanswered,
    to_withdrawn,
)

#: Largest accepted content, measured as compact UTF-8 JSON.
MAX_CONTENT_BYTES = 64 * 1024
#: Longest a ``get`` may wait for a change, whatever the caller asks.
MAX_GET_WAIT_S = 60.0
#: Compare-and-set attempts before giving up with :class:`ContentionError`.
MAX_CAS_ATTEMPTS = 64
#: How long :meth:`InputsService.mark_committed` keeps retrying a failing marking; under the
#: journal's bound on its ``on_committed`` hook (10 s), so the lifecycle event is not held longer.
MARK_COMMITTED_BUDGET_S = 8.0
#: First pause between two markings, doubled after each failure up to the next bound.
MARK_COMMITTED_BACKOFF_S = 0.1
MARK_COMMITTED_BACKOFF_MAX_S = 1.0


@final
@attrs.frozen
class StoredSubmission:
    """A submission with the KV revision it was read at (what a compare-and-set needs)."""

    submission: Submission
    revision: int


def submission_key(run_id: str, step_id: str, request_id: str) -> str:
    """Injective in the request id, whatever printable characters it holds."""
    return f"{run_id}.{step_id}.{request_id_token(request_id)}"


def index_key(run_id: str, step_id: str) -> str:
    return f"{run_id}.{step_id}"


def step_prefix(run_id: str, step_id: str) -> str:
    """Prefix of every submission key of a step (the index key itself does not match it)."""
    return f"{run_id}.{step_id}."


def parse_mode(mode: Mode | str) -> Mode:
    if isinstance(mode, Mode):
        return mode
    try:
        return Mode(mode)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in Mode)
        raise BadRequestError(
            f"mode {mode!r} is not one of {allowed}", code="invalid_mode"
        ) from None


def check_ids(run_id: str, step_id: str, request_id: str | None = None) -> None:
    """:class:`BadRequestError` (code ``invalid_<field>``) naming the first bad id."""
    try:
        check_id("run_id", run_id)
        check_id("step_id", step_id)
        if request_id is not None:
            check_request_id(request_id)
    except InvalidId as exc:
        if exc.value == "":
            raise BadRequestError(f"{exc.field} is required", code=exc.code) from None
        raise BadRequestError(str(exc), code=exc.code) from None


def check_content(content: JsonValue) -> None:
    try:
        encoded = encode_json(content, where="content")
    except JsonPolicyError as exc:
        raise BadRequestError(str(exc), code="invalid_content") from None
    if len(encoded) > MAX_CONTENT_BYTES:
        raise ContentTooLargeError(
            f"content is {len(encoded)} bytes encoded; the limit is {MAX_CONTENT_BYTES}"
        )


def _ttl_of(sub: Submission) -> int | None:
    """The per-message TTL of a write of ``sub``: the dedupe window once it is settled."""
    return layout.INPUTS_DEDUPE_TTL_S if sub.status.settled else None


def _index_ttl(index: StepIndex) -> int | None:
    """A closed index goes with the dedupe window too; an open one lives as long as its step."""
    return layout.INPUTS_DEDUPE_TTL_S if index.closed else None


def _decode_submission(data: bytes) -> Submission:
    return from_json(data, Submission, "input submission")


def _decode_index(data: bytes) -> StepIndex:
    return from_json(data, StepIndex, "input index")


@final
class InputsService:
    """Submit, read, withdraw and settle inputs; also the engine's ``InputsHooks``."""

    def __init__(self, transport: Transport, env: RuntimeEnv = DEFAULT_ENV) -> None:
        self._t = transport
        self._env = env

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
        existing = await self._read(key)
        if existing is not None:
            if existing.submission.status is SubmissionStatus.QUEUED:
                await self._announce(existing.submission)
            return existing.submission, False
        await self._check_step_open(run_id, step_id)
        # The index entry comes first: a crash before the record is written leaves an entry
        # without a record (skipped by readers, kept in place for a retry of the same id), never
        # a queued record that nothing lists.
        order = await self._index_add(run_id, step_id, request_id, mode)
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
            winner = await self._read(key)
            if winner is None:
                raise ContentionError(
                    f"input {request_id!r} changed while being submitted"
                ) from None
            return winner.submission, False
        # Settlement closes the index, then settles the records it listed; a record written after
        # that read would stay queued on a finished step, so look at the index again and settle
        # our own record if the step closed meanwhile.
        index = await self._read_index(run_id, step_id)
        if index is not None and index.closed:
            settled = await self._transition(
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
            return (await self._require(key, request_id)).submission
        if wait_s < 0:
            raise BadRequestError(f"wait must be >= 0 seconds, got {wait_s}", code="invalid_wait")
        async with self._t.kv_watch(layout.INPUTS_BUCKET, step_prefix(run_id, step_id)) as changes:
            current = (await self._require(key, request_id)).submission
            baseline = since if since is not None else current.status
            if current.status is not baseline or current.status.settled:
                return current
            with trio.move_on_after(min(wait_s, MAX_GET_WAIT_S)):
                async for entry in changes:
                    if entry.key != key or entry.value is None:
                        continue
                    current = _decode_submission(entry.value)
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
            stored = await self._require(key, request_id)
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
                    layout.INPUTS_BUCKET, key, to_json(new), stored.revision, ttl_s=_ttl_of(new)
                )
            except RevisionMismatch:
                continue
            await self.drop_from_index(run_id, step_id, [request_id])
            return new
        raise ContentionError(f"input {request_id!r} kept changing; try again")

    async def has_queued(self, run_id: str, step_id: str) -> bool:
        """Any input of either mode queued for the step (the engine's wait check)."""
        index = await self._read_index(run_id, step_id)
        if index is None:
            return False
        for entry in index.queued:
            stored = await self._read(submission_key(run_id, step_id, entry.request_id))
            if stored is not None and stored.submission.status is SubmissionStatus.QUEUED:
                return True
        return False

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
        listed = await self._index_close(run_id, step_id)
        keys = set(await self._t.kv_keys(layout.INPUTS_BUCKET, step_prefix(run_id, step_id)))
        keys.update(submission_key(run_id, step_id, e.request_id) for e in listed)
        open_subs: builtins.list[StoredSubmission] = []
        for key in sorted(keys):
            stored = await self._read(key)
            # None: a submission in flight; it sees the closed index and settles itself.
            if stored is not None and not stored.submission.status.settled:
                open_subs.append(stored)
        if open_subs:
            journal = JournalPlacements()
            if any(s.submission.status is SubmissionStatus.PLACED for s in open_subs):
                journal = await self.journal_placements(run_id, step_id)
            now = self._env.wall_ms()
            for stored in open_subs:
                await self._transition(stored, lambda s: settle_finished(s, journal, now))
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
            stored = await self._read(submission_key(run_id, step_id, request_id))
            if stored is None or stored.submission.status is not SubmissionStatus.PLACED:
                continue
            done = await self._transition(stored, lambda s: to_done(s, now))
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

    # --- for placement ---------------------------------------------------------------------

    async def placement_candidates(
        self, run_id: str, step_id: str, mode: Mode
    ) -> builtins.list[StoredSubmission]:
        """Indexed submissions of ``mode``, in submission order, whatever their status now."""
        index = await self._read_index(run_id, step_id)
        if index is None:
            return []
        found: builtins.list[StoredSubmission] = []
        for entry in index.queued:
            if entry.mode is not mode:
                continue
            stored = await self._read(submission_key(run_id, step_id, entry.request_id))
            if stored is not None:
                found.append(stored)
        return found

    async def claim(self, stored: StoredSubmission, iteration: int) -> StoredSubmission | None:
        """queued -> placed by compare-and-set at the revision read.

        None when the submission changed meanwhile (the caller re-reads and decides again).
        """
        new = to_placed(stored.submission, iteration)
        key = self._key_of(new)
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
                layout.INPUTS_BUCKET, self._key_of(new), to_json(new), stored.revision
            )
        except RevisionMismatch:
            return None
        return StoredSubmission(new, revision)

    async def journal_placements(self, run_id: str, step_id: str) -> JournalPlacements:
        """What the step's journal records about placements (a full read of its journal: only
        the repair of a lost claim and the settlement of a finished step need it)."""
        return await _journal.read_placements(self._t, run_id, step_id)

    async def reread(self, sub: Submission) -> StoredSubmission | None:
        return await self._read(self._key_of(sub))

    async def drop_from_index(self, run_id: str, step_id: str, request_ids: Iterable[str]) -> None:
        """Remove entries whose submission left ``queued`` (best effort: the record decides)."""
        ids = frozenset(request_ids)
        if not ids:
            return
        await self._update_index(
            run_id, step_id, lambda ix: _index.without(ix, ids), create_if_missing=False
        )

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
            stored = await self._read(key)
            if stored is not None:
                subs.append(stored.submission)
        subs.sort(key=lambda s: s.order)
        return subs

    # --- internals ---------------------------------------------------------------------------

    @staticmethod
    def _key_of(sub: Submission) -> str:
        return submission_key(sub.run_id, sub.step_id, sub.request_id)

    async def _read(self, key: str) -> StoredSubmission | None:
        entry = await self._t.kv_get(layout.INPUTS_BUCKET, key)
        if entry is None or entry.value is None:
            return None
        return StoredSubmission(_decode_submission(entry.value), entry.revision)

    async def _require(self, key: str, request_id: str) -> StoredSubmission:
        stored = await self._read(key)
        if stored is None:
            raise NotFoundError(f"no input {request_id!r} for this step", code="input_not_found")
        return stored

    async def _transition(
        self, stored: StoredSubmission, move: Callable[[Submission], Submission]
    ) -> StoredSubmission | None:
        """Apply ``move`` by compare-and-set, re-reading on a lost race.

        Returns the stored result, or the current state when ``move`` no longer applies
        (someone else moved it first), or None when the key is gone.
        """
        key = self._key_of(stored.submission)
        current: StoredSubmission | None = stored
        for _ in range(MAX_CAS_ATTEMPTS):
            if current is None:
                return None
            try:
                new = move(current.submission)
            except InvalidTransition:
                return current
            try:
                revision = await self._t.kv_update(
                    layout.INPUTS_BUCKET, key, to_json(new), current.revision, ttl_s=_ttl_of(new)
                )
            except RevisionMismatch:
                current = await self._read(key)
                continue
            return StoredSubmission(new, revision)
        raise ContentionError(f"input {stored.submission.request_id!r} kept changing")

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

    async def _read_index(self, run_id: str, step_id: str) -> StepIndex | None:
        entry = await self._t.kv_get(layout.INPUTS_BUCKET, index_key(run_id, step_id))
        if entry is None or entry.value is None:
            return None
        return _decode_index(entry.value)

    async def _update_index(
        self,
        run_id: str,
        step_id: str,
        change: Callable[[StepIndex], StepIndex],
        *,
        create_if_missing: bool = True,
    ) -> tuple[StepIndex, StepIndex]:
        """Compare-and-set loop on the step's index; returns (before, after)."""
        key = index_key(run_id, step_id)
        for _ in range(MAX_CAS_ATTEMPTS):
            entry = await self._t.kv_get(layout.INPUTS_BUCKET, key)
            if entry is None or entry.value is None:
                before = StepIndex()
                if not create_if_missing:
                    return before, before
                after = change(before)
                try:
                    await self._t.kv_create(
                        layout.INPUTS_BUCKET, key, to_json(after), ttl_s=_index_ttl(after)
                    )
                except KeyExists:
                    continue
                return before, after
            before = _decode_index(entry.value)
            after = change(before)
            if after == before:
                return before, after
            try:
                await self._t.kv_update(
                    layout.INPUTS_BUCKET,
                    key,
                    to_json(after),
                    entry.revision,
                    ttl_s=_index_ttl(after),
                )
            except RevisionMismatch:
                continue
            return before, after
        raise ContentionError(f"the input index of step {step_id!r} kept changing; try again")

    async def _index_add(self, run_id: str, step_id: str, request_id: str, mode: Mode) -> int:
        order = -1

        def add(ix: StepIndex) -> StepIndex:
            nonlocal order
            new, order = _index.with_submission(ix, request_id, mode)
            return new

        await self._update_index(run_id, step_id, add)
        return order

    async def _index_close(self, run_id: str, step_id: str) -> tuple[IndexEntry, ...]:
        before, _ = await self._update_index(run_id, step_id, _index.closed)
        return before.queued
