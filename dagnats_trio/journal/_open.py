"""Opening a journal: the claim protocol of ``await tc.journal()``.

Read the tail, judge it (``_replay.judge_tail``), read the iteration's records only when the tail
is not the previous iteration's commit, plan the claim (``_replay.plan_claim``), then append the
claim fenced on the tail. The settled outcomes (stale, committed, restart limit, unreadable) are
decided here, before a :class:`Journal` is handed to the handler.

The fast path is the *predicted claim*: ONE fenced append, no tail read. On the first delivery
of a task's first attempt, the client predicts the tail: the subject is empty (a first
iteration: the task names no commit), or it is the continue commit at the task's
``journal_seq``, which this client stored itself (:class:`KnownCommits` remembers it, content
and sequence, from the server's ack). When ``judge_tail`` says that predicted tail is one the
claim goes straight on from (``EMPTY`` or ``BASE``), the claim is appended fenced on the
predicted sequence (0: the subject is empty) without reading.

Why an accepted predicted claim *is* the spec's "reads the journal tail from the stream
leader": the stream leader stores a publish carrying Nats-Expected-Last-Subject-Sequence only
when the subject's last sequence equals it, compared atomically with the store (one leader
orders every write of the stream). So the claim's ack says that, at the leader, the tail was
exactly the predicted message, whose content this client knows (the message at a sequence
never changes): the read would have returned it, ``judge_tail`` would have judged it as
predicted (not stale: the tail is the commit this task follows, of the iteration before it;
not this dispatch's own commit; no claim after it, so the restart limit is not reached, and
a claim is appended exactly as after the read), and the claim is stored at the same place the
read-then-claim would have put it, counting toward the restart limit like any claim. The
read's answer would only be older than the ack (the tail could move right after either), so
the ack is the fresher proof, as with ``TAIL_PROOF_FRESH_S`` (``_fencing``): the claim's ack
also stands for the model call's tail read.

A refused predicted claim stores nothing, and the holder is fenced exactly as a holder whose
claim was refused after its read: it "saw" the predicted tail (the task and its own commit
told it) and lost it, so, as the spec says of a writer that lost the tail, it cannot write. The
delivery is not acked and comes back, and a redelivery (or a later attempt) always reads the
tail first (the path above: stale check, restart limit, adopt, republish), because the tail
may hold a predecessor's claim then. Nothing else is predicted: a redelivery, a retry, a task
whose commit another client stored, a tail the rules would not claim straight after.

Why a refused claim fences instead of reading the tail and claiming again: the tail of a first
delivery's journal moves only under another holder of the same dispatch, and that is, almost
always, the redelivery that took this delivery's task after its lease ran out (this holder
stalled before its claim, past the AckWait: the crash matrix's ``before_claim`` stall). Reading
again would claim over that successor, a zombie fencing the rightful holder; fenced, the zombie
writes nothing, exactly as one that read the tail before its stall. The rare other case (the
same dispatch published again past the stream's duplicate window, whose first holder crashed)
costs an AckWait: the delivery comes back and reads. Two holders of one delivery at once race
their claims on the same sequence as before: one is stored, the other fenced.
"""

from __future__ import annotations

import logging

from dagnats_trio._defaults import DEFAULT_RESTART_LIMIT, check_restart_limit
from dagnats_trio._env import DEFAULT_ENV, RuntimeEnv
from dagnats_trio._seams import Seam, current_hook
from dagnats_trio.protocol import ClaimRecord, CommitAction, CommitRecord, TaskMessage
from dagnats_trio.protocol.layout import journal_subject
from dagnats_trio.transport import StoredMsg, Transport

from ._committed import OnCommitted, notify_committed
from ._errors import Committed, JournalCorrupt, JournalUnreadable, RestartLimit, Stale
from ._events import publish_lifecycle
from ._fencing import FencedWriter
from ._handle import Journal
from ._holder import DeliveryState, Settlement
from ._known import KnownCommits
from ._reads import decode_entry, read_entries, read_tail
from ._replay import (
    RESTART_LIMIT_REASON,
    UNREADABLE_REASON,
    ClaimPlan,
    Entry,
    PlanKind,
    ReplayView,
    TailKind,
    TaskIdentity,
    empty_view,
    event_for_commit,
    judge_tail,
    placed_before,
    plan_claim,
)

_log = logging.getLogger(__name__)


async def open_journal(
    transport: Transport,
    task: TaskMessage,
    *,
    holder: DeliveryState | None = None,
    restart_limit: int = DEFAULT_RESTART_LIMIT,
    env: RuntimeEnv = DEFAULT_ENV,
    on_committed: OnCommitted | None = None,
    known: KnownCommits | None = None,
    first_delivery: bool = False,
) -> Journal:
    """Claim the journal of ``task``: what ``await tc.journal()`` does.

    ``known`` is the calling client's memory of the continue commits it stored (it learns this
    journal's commit too); ``first_delivery`` says this is the task message's first delivery.
    With both, the claim may be the predicted claim of the module's docstring (no tail read).

    Raises :class:`Stale` (late redelivery), :class:`Committed` (this dispatch committed: its
    event was published again), :class:`RestartLimit` (failure committed and published) or
    :class:`Fenced` (a successor claimed first) or :class:`JournalUnreadable` (a record cannot be
    decoded: this attempt's failure was committed and published); ``holder.settlement`` says
    what to do then.
    """
    check_restart_limit(restart_limit)
    ident = TaskIdentity.of(task)
    if holder is None:
        holder = DeliveryState(ident)
    holder.check_writable()
    subject = journal_subject(ident.run_id, ident.step_id)
    predicted = _predicted_view(ident, subject, known) if first_delivery else None
    if predicted is not None:
        if current_hook() is not None:
            await holder.seam(Seam.BEFORE_CLAIM)
        journal = await _claim(
            transport,
            ident,
            holder,
            last_seq=ident.journal_seq or 0,
            view=predicted,
            env=env,
            on_committed=on_committed,
            known=known,
        )
        if current_hook() is not None:
            await holder.seam(Seam.AFTER_CLAIM)
        return journal
    tail_msg = await read_tail(transport, subject)
    try:
        tail, plan = await _plan(transport, ident, holder, tail_msg, restart_limit, on_committed)
    except JournalCorrupt as exc:
        assert tail_msg is not None  # an unreadable record means there is a tail
        await _fail_unreadable(
            transport, ident, holder, tail_msg.seq, exc, env, on_committed, known
        )
        raise JournalUnreadable(str(exc)) from exc
    assert plan.view is not None
    if current_hook() is not None:
        await holder.seam(Seam.BEFORE_CLAIM)
    journal = await _claim(
        transport,
        ident,
        holder,
        last_seq=tail[0] if tail is not None else 0,
        view=plan.view,
        env=env,
        on_committed=on_committed,
        known=known,
    )
    if current_hook() is not None:
        await holder.seam(Seam.AFTER_CLAIM)
    if plan.restart_limit:
        await journal.settle(
            CommitAction.FAIL,
            error=(
                f"claimed {restart_limit} times in a row without progress "
                f"(restart_limit {restart_limit})"
            ),
            retriable=True,
            reason=RESTART_LIMIT_REASON,
        )
        raise RestartLimit(f"restart limit {restart_limit} reached at iteration {ident.iteration}")
    return journal


def _predicted_view(
    ident: TaskIdentity, subject: str, known: KnownCommits | None
) -> ReplayView | None:
    """The view to claim with, fenced on the predicted tail without reading it (the module's
    docstring), or None: read the tail first. Only a first attempt is predicted (a retry's
    tail holds the failed attempt's records); the tail is predicted empty when the task names
    no commit, else the continue commit it names, when this client stored it; the prediction
    stands only when the tail rules would claim straight after that tail."""
    if ident.attempt != 1:
        return None
    if ident.journal_seq is None:
        if known is not None and known.knows(subject):
            return None  # this client stored a commit there: the subject is not empty
        predicted: Entry | None = None
    else:
        predicted = known.commit_at(subject, ident.journal_seq) if known is not None else None
        if predicted is None:
            return None
    verdict = judge_tail(predicted, ident)
    if verdict.kind is TailKind.EMPTY:
        return empty_view(ident)
    if verdict.kind is TailKind.BASE:
        return empty_view(ident, base=predicted)
    return None


async def _claim(
    transport: Transport,
    ident: TaskIdentity,
    holder: DeliveryState,
    *,
    last_seq: int,
    view: ReplayView,
    env: RuntimeEnv,
    on_committed: OnCommitted | None,
    known: KnownCommits | None = None,
) -> Journal:
    """Append a claim fenced on ``last_seq`` and hand back the handle that writes after it."""
    writer = FencedWriter(
        transport=transport,
        subject=journal_subject(ident.run_id, ident.step_id),
        holder=holder,
        claim_id=env.new_id(),
        last_seq=last_seq,
        known=known,
    )
    await writer.append(ClaimRecord(ident.iteration, ident.attempt, writer.claim_id, ident.nonce))
    return Journal(
        transport=transport,
        task=ident,
        holder=holder,
        writer=writer,
        view=view,
        on_committed=on_committed,
    )


async def _plan(
    transport: Transport,
    ident: TaskIdentity,
    holder: DeliveryState,
    tail_msg: StoredMsg | None,
    restart_limit: int,
    on_committed: OnCommitted | None,
) -> tuple[Entry | None, ClaimPlan]:
    """Read what the claim needs and plan it. Raises :class:`JournalCorrupt` on a record that
    cannot be decoded, and the settled errors of :func:`open_journal`."""
    subject = journal_subject(ident.run_id, ident.step_id)
    tail = decode_entry(tail_msg) if tail_msg is not None else None
    verdict = judge_tail(tail, ident)
    plan: ClaimPlan
    if verdict.kind is TailKind.STALE:
        holder.settlement = Settlement.ACK
        raise Stale(verdict.reason)
    if verdict.kind is TailKind.COMMITTED:
        assert tail is not None
        await _republish(transport, ident, holder, tail, on_committed)
    if verdict.kind is TailKind.EMPTY:
        plan = ClaimPlan(PlanKind.PROCEED, view=empty_view(ident))
    elif verdict.kind is TailKind.BASE:
        plan = ClaimPlan(PlanKind.PROCEED, view=empty_view(ident, base=tail))
    else:
        assert tail is not None
        entries = await read_entries(transport, subject, verdict.read_from, tail[0])
        plan = plan_claim(entries, ident, restart_limit, full=verdict.read_from <= 1)
        if plan.kind is PlanKind.NEED_FULL_READ:
            entries = await read_entries(transport, subject, 1, tail[0])
            plan = plan_claim(entries, ident, restart_limit, full=True)
        if plan.kind is PlanKind.STALE:
            holder.settlement = Settlement.ACK
            raise Stale(plan.reason)
        if plan.kind is PlanKind.COMMITTED:
            await _republish(transport, ident, holder, tail, on_committed)
        if plan.kind is PlanKind.ADOPT:
            assert plan.commit is not None
            await _republish(transport, ident, holder, plan.commit, on_committed)
    return tail, plan


async def _fail_unreadable(
    transport: Transport,
    ident: TaskIdentity,
    holder: DeliveryState,
    tail_seq: int,
    exc: JournalCorrupt,
    env: RuntimeEnv,
    on_committed: OnCommitted | None,
    known: KnownCommits | None,
) -> None:
    """Fail this attempt after an unreadable record: a claim and a retriable failure appended
    after the tail (fenced on it, like any claim), and its ``step.failed`` event published.

    Nothing is replayed and nothing runs: a journal no holder can read cannot say which unsafe
    tools were started, so none may start again. The commit carries no state (the state of
    record may be what is unreadable); a later attempt starts from its base commit again, reads
    the same record and fails the same way, so the step's retry policy ends it.
    """
    _log.error(
        "%s.%s iteration %d attempt %d failed: %s",
        ident.run_id,
        ident.step_id,
        ident.iteration,
        ident.attempt,
        exc,
    )
    journal = await _claim(
        transport,
        ident,
        holder,
        last_seq=tail_seq,
        view=empty_view(ident),
        env=env,
        on_committed=on_committed,
        known=known,
    )
    journal.set_state(None)
    await journal.settle(
        CommitAction.FAIL, error=str(exc), retriable=True, reason=UNREADABLE_REASON
    )


async def _republish(
    transport: Transport,
    ident: TaskIdentity,
    holder: DeliveryState,
    tail: Entry,
    on_committed: OnCommitted | None,
) -> None:
    """This dispatch committed and crashed before (or while) publishing, or an earlier attempt
    ended the iteration after the engine moved on (``ADOPT``): publish the commit's event under
    this dispatch's identity."""
    seq, commit = tail
    assert isinstance(commit, CommitRecord)
    if on_committed is not None and commit.action is not CommitAction.FAIL:
        entries = await read_entries(
            transport, journal_subject(ident.run_id, ident.step_id), ident.journal_seq or 1, seq
        )
        ids = placed_before(entries, seq, ident.iteration)
        await notify_committed(on_committed, ident, commit, seq, ids)
    await publish_lifecycle(transport, event_for_commit(commit, ident, seq))
    holder.settlement = Settlement.ACK
    if current_hook() is not None:
        await holder.seam(Seam.AFTER_LIFECYCLE_EVENT)
    raise Committed(f"iteration {ident.iteration} was committed at sequence {seq}; event resent")
