"""The journal audit (``dagnats journal check``): a pure check over records (no I/O; the
one reader, :func:`dagnats_trio.journal.read_journal`, lives with the handle).

The rules, precisely (``rule`` names in parentheses):

1. Commits. At most one commit per dispatch, that is per ``(iteration, nonce)``
   (``duplicate-commit``). At most one commit *ends* an iteration: continue, complete, or a
   permanent failure (``iteration-ended-twice``); pause commits and retriable failure commits of
   failed attempts are allowed besides it. Nothing of an iteration follows the commit that ended
   it (``record-after-end``). Iteration ``i`` > 0 begins only after a continue commit of ``i - 1``
   (``iteration-without-commit``), and no record names an earlier iteration than one already
   begun (``record-of-earlier-iteration``).
2. Fencing. Every record but a claim is written under the latest claim before it: a record
   whose ``claim_id`` belongs to an earlier claim was written after the claim that fenced its
   writer (``write-after-fenced``); one whose claim never appears is ``unclaimed-write``; one
   whose iteration or attempt differ from its claim's is ``claim-mismatch``.
3. Tools. Per ``(iteration, attempt, call)``: at most one intent (``duplicate-intent``) and one
   result (``duplicate-result``), a result or partial output only after an intent
   (``result-without-intent``, ``output-without-intent``), no model record and tool intent at one
   position (``position-reused``), and every intent answered by its result before its attempt
   commits with continue, complete or pause (``unanswered-intent``). An intent left unanswered
   by an attempt that never committed, or that committed a failure (the restart limit does so
   over crashed holders' intents), is allowed: a retry honours it.
   Parallel groups (``Journal.tools``): a member's intent lies inside its group's positions
   (``group-shape``), and under one claim no intent of a group follows a result or partial
   output of that group (``group-intent-after-start``): every intent before any start. The
   intents one claim writes for a group are stored together: all in one message (they share
   its sequence), or, when any of them carries a batch mark, all marked and found together in
   one atomic batch (``group-intents-split``); unmarked ones each alone in its own message were
   stored one by one, before groups were batched.
4. Inputs. Each ``request_id`` is placed once in the whole journal (``input-placed-twice``).
0. Decoding. Every stored record decodes; one that does not (not JSON, not an object, an
   unknown ``type``, a missing or mistyped field, an empty body) is ``undecodable`` at its
   sequence, and the other rules run over the records that did decode.
7. Batches. Records stored as one atomic batch carry their place in it, ``k/n`` (the
   ``Dagnats-Batch`` header; ``batches`` maps a sequence to it). The server stores a batch whole
   or not at all, so its records are found together: ``1/n`` to ``n/n`` in order with nothing of
   the subject between them (``batch-broken``), none a claim and all written under one claim
   (``batch-claims``). A record without a mark was stored alone, as every record of a journal
   written before batches existed, or with others as ONE message (a record group): the records
   sharing one sequence, stored whole by construction, and likewise none a claim and all
   written under one claim (``batch-claims``).
5. Iterations. ``engine_iterations``, the engine's count of ended iterations of the step
   (``StepState.iterations``), equals the continue plus complete commits
   (``iteration-count``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import final

import attrs

from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    InputPlacedRecord,
    JournalRecord,
    ModelRecord,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
)


@final
@attrs.frozen
class Violation:
    rule: str
    seq: int | None
    message: str

    def __str__(self) -> str:
        where = f"seq {self.seq}: " if self.seq is not None else ""
        return f"[{self.rule}] {where}{self.message}"


#: The rule of a stored record that does not decode.
UNDECODABLE_RULE = "undecodable"


@final
@attrs.frozen
class Unreadable:
    """A stored record that did not decode: its sequence and what was wrong with it."""

    seq: int
    problem: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.problem}"


@final
@attrs.frozen
class CheckReport:
    violations: tuple[Violation, ...]
    records: int
    commits: int
    iterations: int

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        head = "journal ok" if self.ok else f"journal has {len(self.violations)} violation(s)"
        return f"{head}: {self.records} records, {self.commits} commits, {self.iterations} ended"

    def render(self) -> str:
        return "\n".join([self.summary(), *(f"  {v}" for v in self.violations)])


def _ends(rec: CommitRecord) -> bool:
    return rec.action in (CommitAction.CONTINUE, CommitAction.COMPLETE) or (
        rec.action is CommitAction.FAIL and not rec.retriable
    )


GroupKey = tuple[str, int, int, int]


def _check_group_intent(
    rec: ToolIntentRecord,
    seq: int,
    where: str,
    group_of: dict[tuple[int, int, int], int],
    group_started: dict[GroupKey, int],
    bad: Callable[[str, int | None, str], None],
) -> None:
    """Rule 6: a member lies inside its group, and no member's intent follows a result or
    output of its group written under the same claim (every intent before any start)."""
    assert rec.group is not None
    size = rec.group_size or 0
    if not rec.group <= rec.call < rec.group + size:
        bad("group-shape", seq, f"{where} is outside its group ({rec.group}, size {size})")
    group_of[(rec.iteration, rec.attempt, rec.call)] = rec.group
    started = group_started.get((rec.claim_id, rec.iteration, rec.attempt, rec.group))
    if started is not None:
        bad(
            "group-intent-after-start",
            seq,
            f"intent at {where} after a member of its group ran (seq {started})",
        )


def _group_started(
    rec: ToolOutputRecord | ToolResultRecord,
    seq: int,
    group_of: dict[tuple[int, int, int], int],
    group_started: dict[GroupKey, int],
) -> None:
    group = group_of.get((rec.iteration, rec.attempt, rec.call))
    if group is not None:
        group_started.setdefault((rec.claim_id, rec.iteration, rec.attempt, group), seq)


def _parse_mark(mark: str) -> tuple[int, int] | None:
    k, sep, n = mark.partition("/")
    if not sep or not k.isdigit() or not n.isdigit() or not 1 <= int(k) <= int(n):
        return None
    return int(k), int(n)


def _check_batches(
    records: Sequence[tuple[int, JournalRecord]],
    batches: Mapping[int, str],
    bad: Callable[[str, int | None, str], None],
) -> None:
    """Rule 7: every batch found whole, in order, under one claim, without a claim in it."""
    open_at: int | None = None  # the sequence of the batch's first record
    want = (0, 0)  # the next (k, n) expected inside an open batch
    claim = ""
    for seq, rec in records:
        mark = batches.get(seq)
        parsed = _parse_mark(mark) if mark is not None else None
        if mark is not None and parsed is None:
            bad("batch-broken", seq, f"unreadable batch mark {mark!r}")
        if open_at is not None and parsed != want:
            bad("batch-broken", open_at, f"a batch of {want[1]} records stops at record "
                                         f"{want[0] - 1} (seq {seq} is not its next)")  # fmt: skip
            open_at = None
        if parsed is None:
            continue
        k, n = parsed
        if open_at is None:
            if k != 1:
                bad("batch-broken", seq, f"record {k}/{n} of a batch without its first")
                continue
            open_at, claim = seq, rec.claim_id
        if isinstance(rec, ClaimRecord) or rec.claim_id != claim:
            bad("batch-claims", seq, f"{rec.TYPE} in a batch begun by claim {claim!r}")
        open_at, want = (None, (0, 0)) if k == n else (open_at, (k + 1, n))
    if open_at is not None:
        bad("batch-broken", open_at, f"a batch of {want[1]} records ends the journal at "
                                     f"record {want[0] - 1}")  # fmt: skip


def _records_per_seq(records: Sequence[tuple[int, JournalRecord]]) -> dict[int, int]:
    per_seq: dict[int, int] = {}
    for seq, _ in records:
        per_seq[seq] = per_seq.get(seq, 0) + 1
    return per_seq


def _check_messages(
    records: Sequence[tuple[int, JournalRecord]],
    bad: Callable[[str, int | None, str], None],
) -> None:
    """Rule 7 (record groups): the records of one message (sharing its sequence) are one
    writer's: none a claim, all under one claim."""
    first: dict[int, JournalRecord] = {}
    per_seq = _records_per_seq(records)
    for seq, rec in records:
        if per_seq[seq] < 2:
            continue
        head = first.setdefault(seq, rec)
        if isinstance(rec, ClaimRecord) or rec.claim_id != head.claim_id:
            bad(
                "batch-claims",
                seq,
                f"{rec.TYPE} in a group of {per_seq[seq]} records begun by claim {head.claim_id!r}",
            )


def _check_group_batches(
    records: Sequence[tuple[int, JournalRecord]],
    batches: Mapping[int, str],
    bad: Callable[[str, int | None, str], None],
) -> None:
    """Rule 3 (groups): the intents of one group under one claim, when marked, are one batch:
    consecutive records with consecutive marks of one batch size (rule 7 sees it whole)."""
    found: dict[GroupKey, list[tuple[int, int]]] = {}  # (index in records, seq) per group
    for idx, (seq, rec) in enumerate(records):
        if isinstance(rec, ToolIntentRecord) and rec.group is not None:
            key = (rec.claim_id, rec.iteration, rec.attempt, rec.group)
            found.setdefault(key, []).append((idx, seq))
    per_seq = _records_per_seq(records)
    for (claim, iteration, attempt, group), members in found.items():
        if len(members) < 2 or len({seq for _, seq in members}) == 1:
            continue  # a single intent, or all stored as one message
        marks = [_parse_mark(batches.get(seq, "")) for _, seq in members]
        if all(seq not in batches and per_seq[seq] == 1 for _, seq in members):
            continue  # each stored alone, before groups were stored together
        together = all(
            a is not None and b is not None and j == i + 1 and b == (a[0] + 1, a[1])
            for (i, _), (j, _), a, b in zip(members, members[1:], marks, marks[1:], strict=False)
        )
        if not together:
            bad(
                "group-intents-split",
                members[0][1],
                f"the {len(members)} intents of the group at call {group} of iteration "
                f"{iteration} attempt {attempt} (claim {claim!r}) are not stored together",
            )


def check(
    records: Sequence[tuple[int, JournalRecord]],
    engine_iterations: int | None = None,
    unreadable: Sequence[Unreadable] = (),
    batches: Mapping[int, str] | None = None,
) -> CheckReport:
    """Audit one step's journal (records in sequence order, and the stored records that did not
    decode, each a violation; ``batches``: the batch mark of each record stored in a batch, by
    sequence); see the module for the rules."""
    out: list[Violation] = [Violation(UNDECODABLE_RULE, u.seq, u.problem) for u in unreadable]

    def bad(rule: str, seq: int | None, message: str) -> None:
        out.append(Violation(rule, seq, message))

    claims: dict[str, ClaimRecord] = {}
    owner: str | None = None
    commit_of: dict[tuple[int, str], int] = {}
    ended: dict[int, int] = {}
    continued: set[int] = set()
    begun = -1
    intents: dict[tuple[int, int, int], int] = {}
    results: dict[tuple[int, int, int], int] = {}
    group_of: dict[tuple[int, int, int], int] = {}
    group_started: dict[GroupKey, int] = {}
    models: dict[tuple[int, int, int], int] = {}
    placed: dict[str, int] = {}
    commits = 0
    ended_count = 0

    for seq, rec in records:
        i = rec.iteration
        # 1. iterations begin in order, after the previous one continued.
        if i < begun:
            bad("record-of-earlier-iteration", seq, f"iteration {i} after {begun} had begun")
        elif i > begun:
            if i > 0 and (i - 1) not in continued:
                bad(
                    "iteration-without-commit",
                    seq,
                    f"iteration {i} began before {i - 1} had a continue commit",
                )
            begun = i
        if i in ended:
            bad(
                "record-after-end",
                seq,
                f"{rec.TYPE} of iteration {i} after its ending commit at seq {ended[i]}",
            )

        # 2. fencing.
        if isinstance(rec, ClaimRecord):
            claims[rec.claim_id] = rec
            owner = rec.claim_id
        else:
            claim = claims.get(rec.claim_id)
            if claim is None:
                bad("unclaimed-write", seq, f"{rec.TYPE} by claim {rec.claim_id!r}, never claimed")
            elif rec.claim_id != owner:
                bad(
                    "write-after-fenced",
                    seq,
                    f"{rec.TYPE} by claim {rec.claim_id!r} after claim {owner!r} fenced it",
                )
            elif (claim.iteration, claim.attempt) != (rec.iteration, rec.attempt):
                bad(
                    "claim-mismatch",
                    seq,
                    f"{rec.TYPE} names iteration {rec.iteration} attempt "
                    f"{rec.attempt}, its claim {claim.iteration}/{claim.attempt}",
                )

        # 3. tools and models.
        if isinstance(rec, ModelRecord | ToolIntentRecord | ToolOutputRecord | ToolResultRecord):
            k = (rec.iteration, rec.attempt, rec.call)
            where = f"call {rec.call} of iteration {rec.iteration} attempt {rec.attempt}"
            if isinstance(rec, ModelRecord):
                if k in models:
                    bad("position-reused", seq, f"a second model record at {where}")
                elif k in intents:
                    bad("position-reused", seq, f"a model record at tool {where}")
                models[k] = seq
            elif isinstance(rec, ToolIntentRecord):
                if k in intents:
                    bad("duplicate-intent", seq, f"a second intent at {where}")
                elif k in models:
                    bad("position-reused", seq, f"a tool intent at model {where}")
                intents.setdefault(k, seq)
                if rec.group is not None:
                    _check_group_intent(rec, seq, where, group_of, group_started, bad)
            elif isinstance(rec, ToolOutputRecord):
                if k not in intents:
                    bad("output-without-intent", seq, f"partial output at {where}")
                _group_started(rec, seq, group_of, group_started)
            else:
                _group_started(rec, seq, group_of, group_started)
                if k not in intents:
                    bad("result-without-intent", seq, f"a result at {where}")
                if k in results:
                    bad("duplicate-result", seq, f"a second result at {where}")
                results.setdefault(k, seq)

        # 4. inputs.
        if isinstance(rec, InputPlacedRecord):
            if rec.request_id in placed:
                bad(
                    "input-placed-twice",
                    seq,
                    f"input {rec.request_id!r} placed again (first "
                    f"at seq {placed[rec.request_id]})",
                )
            placed.setdefault(rec.request_id, seq)

        if isinstance(rec, CommitRecord):
            commits += 1
            ck = (i, rec.nonce)
            if ck in commit_of:
                bad(
                    "duplicate-commit",
                    seq,
                    f"dispatch {rec.nonce!r} of iteration {i} "
                    f"committed again (first at seq {commit_of[ck]})",
                )
            commit_of.setdefault(ck, seq)
            # A failure commit abandons its attempt (the restart limit commits one over the
            # unanswered intents of crashed holders); a retry honours its unsafe starts.
            answered_required = rec.action is not CommitAction.FAIL
            for (ii, aa, cc), iseq in intents.items():
                if (
                    answered_required
                    and ii == i
                    and aa == rec.attempt
                    and (ii, aa, cc) not in results
                ):
                    bad(
                        "unanswered-intent",
                        iseq,
                        f"tool intent at call {cc} of iteration {i} "
                        f"attempt {aa} had no result when the attempt committed at seq {seq}",
                    )
                    results[(ii, aa, cc)] = -1  # reported once
            if _ends(rec):
                if i in ended:
                    bad(
                        "iteration-ended-twice",
                        seq,
                        f"iteration {i} ended again (first at seq {ended[i]})",
                    )
                else:
                    ended[i] = seq
                if rec.action is not CommitAction.FAIL:
                    ended_count += 1
                if rec.action is CommitAction.CONTINUE:
                    continued.add(i)

    if batches:
        _check_batches(records, batches, bad)
    _check_messages(records, bad)
    _check_group_batches(records, batches or {}, bad)
    if engine_iterations is not None and engine_iterations != ended_count:
        bad(
            "iteration-count",
            None,
            f"the engine counts {engine_iterations} ended iterations, "
            f"the journal has {ended_count} continue/complete commits",
        )
    return CheckReport(tuple(out), len(records) + len(unreadable), commits, ended_count)
