"""The journal audit (``dagnats journal check``): a pure check over records (no I/O; the
one reader, :func:`dagnats_trio.journal.read_journal`, lives with the handle). What it reports
is in ``_check_report``; the rules on records stored together (groups, batches) in
``_check_groups``.

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

from collections.abc import Mapping, Sequence

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

from ._check_groups import (
    GroupKey,
    _check_batches,
    _check_group_batches,
    _check_group_intent,
    _check_messages,
    _group_started,
)
from ._check_report import UNDECODABLE_RULE, CheckReport, Unreadable, Violation

__all__ = ["UNDECODABLE_RULE", "CheckReport", "Unreadable", "Violation", "check"]


def _ends(rec: CommitRecord) -> bool:
    return rec.action in (CommitAction.CONTINUE, CommitAction.COMPLETE) or (
        rec.action is CommitAction.FAIL and not rec.retriable
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
