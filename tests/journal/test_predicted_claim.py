"""The predicted claim (journal ``_open``): a first delivery whose tail the client knows claims
fenced on it without reading it first, one round trip instead of two; any other delivery, and a
prediction the server refuses, keep the spec's order (read the tail, stale check, claim, restart
limit). On a real nats-server (nats-py and the native client) and on SimTransport."""

from __future__ import annotations

import pytest

from dagnats_trio.journal import (
    KNOWN_COMMITS_MAX_SUBJECTS,
    DeliveryState,
    Fenced,
    KnownCommits,
    RestartLimit,
    ScriptedModel,
    Settlement,
    Stale,
    TaskIdentity,
    open_journal,
    read_journal,
)
from dagnats_trio.protocol import ClaimRecord, CommitAction, CommitRecord, JournalRecord
from dagnats_trio.protocol.layout import journal_subject
from dagnats_trio.transport import Transport

from ._helpers import make_task, uid


@pytest.fixture(params=["nats", "trio", "sim"])
def any_transport(request: pytest.FixtureRequest) -> Transport:
    """nats-py and the native client on the session nats-server, and SimTransport."""
    value: Transport = request.getfixturevalue(f"{request.param}_transport")
    return value


async def _records(t: Transport, run_id: str) -> list[tuple[int, JournalRecord]]:
    return await read_journal(t, run_id, "agent")


async def _first_iteration(t: Transport, known: KnownCommits, run_id: str) -> int:
    """Iteration 0 claimed (predicted: an empty subject) and committed with ``continue`` and
    the state ``{"turns": 1}``; returns the commit's sequence."""
    j = await open_journal(t, make_task(run_id), known=known, first_delivery=True)
    j.set_state({"turns": 1})
    return await j.settle(CommitAction.CONTINUE, output="o0")


async def test_a_first_delivery_claims_without_reading_the_tail(any_transport: Transport) -> None:
    t, known = any_transport, KnownCommits()
    run = uid()
    task = make_task(run)
    before = t.round_trips
    j = await open_journal(t, task, known=known, first_delivery=True)
    assert t.round_trips - before == 1  # the claim, fenced on 0 (an empty subject): no read
    ((seq0, claim),) = await _records(t, run)
    assert claim == ClaimRecord(0, 1, j.claim_id, task.dispatch.nonce)
    j.set_state({"turns": 1})
    base = await j.settle(CommitAction.CONTINUE, output="o0")
    assert known.commit_at(journal_subject(run, "agent"), base) is not None

    # Iteration 1 names the commit this client stored: one claim, the state known, and the
    # claim's ack stands for the model call's tail read (TAIL_PROOF_FRESH_S): 2 round trips
    # from the delivery to the model's response stored, against 3 when the tail is read.
    nxt = make_task(run, iteration=1, journal_seq=base)
    model = ScriptedModel(["plan"])
    before = t.round_trips
    j1 = await open_journal(t, nxt, known=known, first_delivery=True)
    assert t.round_trips - before == 1
    assert await j1.load_state() == {"turns": 1}
    assert t.round_trips - before == 1
    assert await j1.model(model) == "plan"
    assert t.round_trips - before == 2
    recs = await _records(t, run)
    assert [type(r).__name__ for _, r in recs] == [
        "ClaimRecord",
        "CommitRecord",
        "ClaimRecord",
        "ModelRecord",
    ]
    assert recs[2] == (base + 1, ClaimRecord(1, 1, j1.claim_id, nxt.dispatch.nonce))
    assert seq0 < base

    # The same delivery without the prediction (a client that did not store the commit, or a
    # redelivery): the tail is read first, as before.
    other = make_task(uid(), iteration=0)
    before = t.round_trips
    await open_journal(t, other, known=KnownCommits(), first_delivery=False)
    assert t.round_trips - before == 2


async def test_a_late_duplicate_is_refused_and_its_redelivery_is_stale(
    any_transport: Transport,
) -> None:
    """Client A committed iteration 0 (it knows that commit); client B ran iteration 1 to its
    commit. A first delivery of iteration 1 at A predicts iteration 0's commit as the tail: the
    server refuses the claim, A is fenced and writes nothing; the redelivery reads the tail,
    finds iteration 1 committed and is stale: acked, nothing run, nothing written."""
    t, known_a = any_transport, KnownCommits()
    run = uid()
    base = await _first_iteration(t, known_a, run)
    task1 = make_task(run, iteration=1, journal_seq=base)
    j_b = await open_journal(t, task1, known=KnownCommits(), first_delivery=True)
    j_b.set_state({"turns": 2})
    await j_b.settle(CommitAction.CONTINUE, output="o1")
    task2 = make_task(run, iteration=2, journal_seq=j_b.last_seq)
    await open_journal(t, task2, known=KnownCommits(), first_delivery=True)
    stored = await _records(t, run)

    late = make_task(run, iteration=1, journal_seq=base, nonce="late")
    holder = DeliveryState(TaskIdentity.of(late))
    with pytest.raises(Fenced):
        await open_journal(t, late, holder=holder, known=known_a, first_delivery=True)
    assert holder.settlement is Settlement.NO_ACK  # not acked: it comes back
    assert await _records(t, run) == stored

    again = DeliveryState(TaskIdentity.of(late))
    with pytest.raises(Stale):
        await open_journal(t, late, holder=again, known=known_a, first_delivery=False)
    assert again.settlement is Settlement.ACK
    assert await _records(t, run) == stored


async def test_a_claim_left_by_a_crash_is_read_and_counted(any_transport: Transport) -> None:
    """A predicted claim counts toward the restart limit like any claim; a refused one stores
    nothing, so it does not count."""
    t, known = any_transport, KnownCommits()
    run = uid()
    base = await _first_iteration(t, known, run)
    task = make_task(run, iteration=1, journal_seq=base)
    await open_journal(t, task, known=known, first_delivery=True, restart_limit=2)  # a crash
    # The same delivery again (a duplicate first delivery): the prediction is refused.
    with pytest.raises(Fenced):
        await open_journal(t, task, known=known, first_delivery=True, restart_limit=2)
    # The redelivery reads [commit, claim]: one claim in a row, under the limit of 2.
    j = await open_journal(t, task, known=known, first_delivery=False, restart_limit=2)
    recs = await _records(t, run)
    claims = [r for _, r in recs if isinstance(r, ClaimRecord) and r.iteration == 1]
    assert [c.claim_id for c in claims][-1] == j.claim_id
    assert len(claims) == 2
    # A third claim in a row reaches it: the failure is committed after the claim.
    holder = DeliveryState(TaskIdentity.of(task))
    with pytest.raises(RestartLimit):
        await open_journal(
            t, task, holder=holder, known=known, first_delivery=False, restart_limit=2
        )
    last = (await _records(t, run))[-1][1]
    assert isinstance(last, CommitRecord) and last.action is CommitAction.FAIL


async def test_nothing_is_predicted_for_a_retry_or_a_commit_the_client_did_not_store(
    any_transport: Transport,
) -> None:
    t, known = any_transport, KnownCommits()
    retry_run, other_run = uid(), uid()
    retry_base = await _first_iteration(t, known, retry_run)
    other_base = await _first_iteration(t, KnownCommits(), other_run)
    for task in (
        make_task(retry_run, iteration=1, attempt=2, journal_seq=retry_base),  # a retry
        make_task(other_run, iteration=1, journal_seq=other_base),  # another client's commit
    ):
        before = t.round_trips
        await open_journal(t, task, known=known, first_delivery=True)
        assert t.round_trips - before == 2  # the tail read, then the claim


async def test_a_later_commit_by_another_client_is_read_and_its_state_used(
    any_transport: Transport,
) -> None:
    """Client A stored iteration 0's commit; client B ran iteration 1 and committed. Iteration
    2 names B's commit, which A does not know: A reads the tail, and the state is B's."""
    t, known_a = any_transport, KnownCommits()
    run = uid()
    base = await _first_iteration(t, known_a, run)
    j_b = await open_journal(
        t, make_task(run, iteration=1, journal_seq=base), known=KnownCommits(), first_delivery=True
    )
    j_b.set_state({"turns": 2})
    b_commit = await j_b.settle(CommitAction.CONTINUE, output="o1")
    before = t.round_trips
    j = await open_journal(
        t, make_task(run, iteration=2, journal_seq=b_commit), known=known_a, first_delivery=True
    )
    assert t.round_trips - before == 2  # the tail read, then the claim
    assert await j.load_state() == {"turns": 2}


async def test_a_known_commit_the_rules_would_not_claim_after_is_read(
    any_transport: Transport,
) -> None:
    """The prediction stands only where the tail rules claim straight on: a remembered commit
    of a later iteration than the task's is judged as a read tail would be (stale), so the
    tail is read and the delivery is stale, writing nothing."""
    t, known = any_transport, KnownCommits()
    run = uid()
    j0 = await open_journal(t, make_task(run, iteration=4), known=known, first_delivery=True)
    seq = await j0.settle(CommitAction.CONTINUE, output="o4")
    stored = await _records(t, run)
    late = make_task(run, iteration=1, journal_seq=seq)
    holder = DeliveryState(TaskIdentity.of(late))
    with pytest.raises(Stale):
        await open_journal(t, late, holder=holder, known=known, first_delivery=True)
    assert holder.settlement is Settlement.ACK
    assert await _records(t, run) == stored


async def test_known_commits_keep_the_last_continue_commit_of_each_subject() -> None:
    known = KnownCommits(max_subjects=2)
    cont = CommitRecord(0, 1, "c", "n", CommitAction.CONTINUE, state=1)
    known.stored("s1", 5, cont)
    assert known.commit_at("s1", 5) == (5, cont)
    assert known.commit_at("s1", 4) is None and known.knows("s1")
    known.stored("s1", 9, CommitRecord(1, 1, "c", "n", CommitAction.COMPLETE))
    assert not known.knows("s1")  # a completed step has no next iteration
    for k in range(3):
        known.stored(f"t{k}", k + 1, cont)
    assert len(known) == 2 and not known.knows("t0") and known.knows("t2")
    assert KNOWN_COMMITS_MAX_SUBJECTS >= 1
    with pytest.raises(ValueError, match="max_subjects"):
        KnownCommits(max_subjects=0)
