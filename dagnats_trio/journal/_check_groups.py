"""The journal audit's rules on records stored together: parallel tool groups (rule 3's group
intents, rule 6's group shape) and atomic batches and record groups (rule 7). Pure: no I/O; the
rules are stated in :mod:`.check`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from dagnats_trio.protocol import (
    ClaimRecord,
    JournalRecord,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
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
