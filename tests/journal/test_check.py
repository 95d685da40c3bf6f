"""``journal check`` over hand-made journals: each kind of violation, and clean ones."""

from __future__ import annotations

import pytest

from dagnats_trio.journal import (
    CommitAction,
    Replay,
    ScriptedModel,
    ToolCall,
    check,
    open_journal,
    read_journal,
)
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitRecord,
    InputPlacedRecord,
    JournalRecord,
    ModelRecord,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
)
from dagnats_trio.transport import NatsTransport

from ._helpers import make_task, uid


def numbered(*recs: JournalRecord) -> list[tuple[int, JournalRecord]]:
    return list(enumerate(recs, start=1))


def claim(it: int, cid: str, att: int = 1, nonce: str | None = None) -> ClaimRecord:
    return ClaimRecord(it, att, cid, nonce or f"n{it}.{att}")


def commit(
    it: int, cid: str, action: CommitAction = CommitAction.CONTINUE, att: int = 1, **kw: object
) -> CommitRecord:
    nonce = str(kw.pop("nonce", f"n{it}.{att}"))
    return CommitRecord(it, att, cid, nonce, action, **kw)  # type: ignore[arg-type]


def intent(it: int, cid: str, call: int, att: int = 1) -> ToolIntentRecord:
    return ToolIntentRecord(it, att, cid, call, "t", None, Replay.UNSAFE, f"k.{call}")


def result(it: int, cid: str, call: int, att: int = 1) -> ToolResultRecord:
    return ToolResultRecord(it, att, cid, call, output=1)


GOOD = numbered(
    claim(0, "a"),
    ModelRecord(0, 1, "a", 0, "m"),
    intent(0, "a", 1),
    ToolOutputRecord(0, 1, "a", 1, "p"),
    claim(0, "b"),  # a redelivery fenced "a"
    ToolResultRecord(0, 1, "b", 1, interrupted=True, partial=["p"]),
    InputPlacedRecord(0, 1, "b", "req-1", "steer", "hi"),
    commit(0, "b"),
    claim(1, "c", nonce="x1"),
    intent(1, "c", 0),  # attempt 1 of iteration 1 dies with an open intent ...
    claim(1, "d", att=2, nonce="x2"),  # ... and attempt 2 honours it
    intent(1, "d", 0, att=2),
    ToolResultRecord(1, 2, "d", 0, interrupted=True),
    commit(1, "d", CommitAction.PAUSE, att=2, nonce="x2"),
    claim(1, "e", att=2, nonce="x3"),
    commit(1, "e", CommitAction.COMPLETE, att=2, nonce="x3"),
)


def test_a_good_journal_passes() -> None:
    report = check(GOOD, engine_iterations=2)
    assert report.ok, report.render()
    assert report.iterations == 2 and report.commits == 3
    assert report.summary().startswith("journal ok")


BAD: dict[str, list[tuple[int, JournalRecord]]] = {
    "duplicate-commit": numbered(
        claim(0, "a"),
        commit(0, "a", CommitAction.PAUSE),
        claim(0, "b"),
        commit(0, "b", CommitAction.PAUSE),
    ),
    "iteration-ended-twice": numbered(
        claim(0, "a"),
        commit(0, "a"),
        claim(0, "b", nonce="other"),
        commit(0, "b", nonce="other"),
    ),
    "record-after-end": numbered(
        claim(0, "a"), commit(0, "a", CommitAction.COMPLETE), ModelRecord(0, 1, "a", 0, "m")
    ),
    "iteration-without-commit": numbered(claim(0, "a"), claim(1, "b")),
    "record-of-earlier-iteration": numbered(
        claim(0, "a"), commit(0, "a"), claim(1, "b"), ModelRecord(0, 1, "a", 0, "m")
    ),
    "write-after-fenced": numbered(claim(0, "a"), claim(0, "b"), ModelRecord(0, 1, "a", 0, "m")),
    "unclaimed-write": numbered(claim(0, "a"), ModelRecord(0, 1, "zzz", 0, "m")),
    "claim-mismatch": numbered(claim(0, "a"), ModelRecord(0, 2, "a", 0, "m")),
    "duplicate-intent": numbered(claim(0, "a"), intent(0, "a", 0), intent(0, "a", 0)),
    "duplicate-result": numbered(
        claim(0, "a"), intent(0, "a", 0), result(0, "a", 0), result(0, "a", 0)
    ),
    "result-without-intent": numbered(claim(0, "a"), result(0, "a", 0)),
    "output-without-intent": numbered(claim(0, "a"), ToolOutputRecord(0, 1, "a", 0, "x")),
    "position-reused": numbered(claim(0, "a"), ModelRecord(0, 1, "a", 0, "m"), intent(0, "a", 0)),
    "unanswered-intent": numbered(claim(0, "a"), intent(0, "a", 0), commit(0, "a")),
    "input-placed-twice": numbered(
        claim(0, "a"),
        InputPlacedRecord(0, 1, "a", "req", "steer", 1),
        commit(0, "a"),
        claim(1, "b"),
        InputPlacedRecord(1, 1, "b", "req", "steer", 1),
    ),
}


@pytest.mark.parametrize("rule", sorted(BAD))
def test_each_violation_is_caught(rule: str) -> None:
    report = check(BAD[rule])
    assert not report.ok
    assert rule in {v.rule for v in report.violations}, report.render()
    assert rule in report.render()


def test_engine_iteration_count() -> None:
    recs = numbered(claim(0, "a"), commit(0, "a"), claim(1, "b"), commit(1, "b"))
    assert check(recs, engine_iterations=2).ok
    assert check(recs, engine_iterations=None).ok
    report = check(recs, engine_iterations=3)
    assert [v.rule for v in report.violations] == ["iteration-count"]


async def test_a_real_journal_passes(nats_transport: NatsTransport) -> None:
    run = uid()
    t0 = make_task(run)
    j = await open_journal(nats_transport, t0)
    await j.model(ScriptedModel(["m"]))

    async def fn(call: ToolCall) -> object:
        return 1

    await j.tool(ToolCall("t"), Replay.UNSAFE, fn)
    j = await open_journal(nats_transport, t0)  # a redelivery
    await j.model(ScriptedModel([]))
    seq = await j.settle(CommitAction.CONTINUE)
    j = await open_journal(nats_transport, make_task(run, iteration=1, journal_seq=seq))
    await j.settle(CommitAction.COMPLETE, output="done")
    recs = await read_journal(nats_transport, run, "agent")
    assert len(recs) == 8
    report = check(recs, engine_iterations=2)
    assert report.ok, report.render()


PAIRED = numbered(
    claim(0, "a"),
    ModelRecord(0, 1, "a", 0, "m"),
    intent(0, "a", 1),
    result(0, "a", 1),
    commit(0, "a"),
)
#: Batch marks by sequence: (model + intent), (result + commit), as the journal stores them.
PAIRED_MARKS = {2: "1/2", 3: "2/2", 4: "1/2", 5: "2/2"}


def test_whole_batches_pass_and_a_journal_without_marks_is_read_as_before() -> None:
    assert check(PAIRED, 1, batches=PAIRED_MARKS).ok
    assert check(PAIRED, 1).ok and check(PAIRED, 1, batches={}).ok


@pytest.mark.parametrize(
    ("marks", "rule", "seq"),
    [
        ({2: "1/2", 4: "1/2", 5: "2/2"}, "batch-broken", 2),  # its second record is missing
        ({3: "2/2"}, "batch-broken", 3),  # a second record without its first
        ({4: "1/3", 5: "2/3"}, "batch-broken", 4),  # cut short at the journal's end
        ({2: "1/2", 3: "x"}, "batch-broken", 3),  # an unreadable mark
        ({1: "1/2", 2: "2/2"}, "batch-claims", 1),  # a claim inside a batch
    ],
)
def test_a_broken_batch_is_caught(marks: dict[int, str], rule: str, seq: int) -> None:
    report = check(PAIRED, 1, batches=marks)
    assert (rule, seq) in {(v.rule, v.seq) for v in report.violations}, report.render()


def test_a_batch_under_two_claims_is_caught() -> None:
    records = numbered(
        claim(0, "a"),
        claim(0, "b"),
        ModelRecord(0, 1, "b", 0, "m"),
        intent(0, "a", 1),
    )
    report = check(records, batches={3: "1/2", 4: "2/2"})
    assert "batch-claims" in {v.rule for v in report.violations}, report.render()


#: The paired journal as the writer stores it now: each pair ONE message (records share its seq).
PAIRED_MESSAGES = [(1, PAIRED[0][1]), (2, PAIRED[1][1]), (2, PAIRED[2][1]), (3, PAIRED[3][1]),
                   (3, PAIRED[4][1])]  # fmt: skip


def test_records_sharing_a_message_pass_and_a_claim_or_two_claims_in_one_are_caught() -> None:
    assert check(PAIRED_MESSAGES, 1).ok, check(PAIRED_MESSAGES, 1).render()
    with_claim = [(1, claim(0, "a")), (2, claim(0, "b")), (2, ModelRecord(0, 1, "b", 0, "m"))]
    report = check(with_claim)
    assert [(v.rule, v.seq) for v in report.violations] == [("batch-claims", 2)], report.render()
    two_claims = [
        (1, claim(0, "a")),
        (2, claim(0, "b")),
        (3, ModelRecord(0, 1, "b", 0, "m")),
        (3, intent(0, "a", 1)),
    ]
    report = check(two_claims)
    assert ("batch-claims", 3) in {(v.rule, v.seq) for v in report.violations}, report.render()


def test_a_groups_intents_in_one_message_pass_and_split_across_messages_are_caught() -> None:
    """``group-intents-split`` with record groups: a group's intents all in one message is whole;
    some in one message and the rest in another is split (unmarked, yet not stored alone)."""

    def member(call: int) -> ToolIntentRecord:
        return ToolIntentRecord(0, 1, "a", call, f"t{call}", None, Replay.SAFE, "k", 0, 3)

    whole = [(1, claim(0, "a")), (2, member(0)), (2, member(1)), (2, member(2))]
    assert check(whole).ok, check(whole).render()
    split = [(1, claim(0, "a")), (2, member(0)), (2, member(1)), (3, member(2))]
    report = check(split)
    assert [(v.rule, v.seq) for v in report.violations] == [("group-intents-split", 2)]
