"""The spec's replay rules as properties of the pure core (no I/O)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.journal import check
from dagnats_trio.journal._replay import (
    Entry,
    ModelAction,
    PlanKind,
    TailKind,
    TaskIdentity,
    ToolAction,
    ToolResult,
    canonical_json,
    decide_model,
    decide_tool,
    judge_tail,
    plan_claim,
    restart_limit_reached,
)
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    JournalRecord,
    ModelRecord,
    Replay,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
    canonical_json_text,
)

RUN, STEP = "r1", "agent"
names = st.sampled_from(["search", "charge", "send"])
inputs = st.one_of(st.integers(0, 3), st.sampled_from(["a", "b"]), st.just({"q": 1}))
replays = st.sampled_from([Replay.SAFE, Replay.UNSAFE])


def task(iteration: int = 0, attempt: int = 1, nonce: str = "n1") -> TaskIdentity:
    return TaskIdentity(RUN, STEP, iteration, attempt, nonce, None)


class Log:
    """Builds entries with sequences, as the stream would."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def add(self, rec: JournalRecord) -> int:
        seq = len(self.entries) + 1
        self.entries.append((seq, rec))
        return seq

    def claim(self, it: int, att: int, cid: str, nonce: str = "n1") -> None:
        self.add(ClaimRecord(it, att, cid, nonce))

    def intent(
        self, it: int, att: int, cid: str, call: int, name: str, inp: Any, rp: Replay
    ) -> None:
        self.add(ToolIntentRecord(it, att, cid, call, name, inp, rp, f"{RUN}.{STEP}.{it}.{call}"))

    def result(self, it: int, att: int, cid: str, call: int, output: Any) -> None:
        self.add(ToolResultRecord(it, att, cid, call, output=output))


def view_of(log: Log, t: TaskIdentity) -> Any:
    plan = plan_claim(log.entries, t, 1000, full=True)
    assert plan.kind is PlanKind.PROCEED, plan
    assert plan.view is not None
    return plan.view


# --- rule: a recorded result is reused, whatever the declaration says --------------------------


@given(name=names, inp=inputs, rec=replays, cur=replays, pos=st.integers(0, 4), out=inputs)
def test_recorded_result_is_reused_whatever_the_declarations(
    name: str, inp: Any, rec: Replay, cur: Replay, pos: int, out: Any
) -> None:
    log = Log()
    log.claim(0, 1, "c1")
    log.intent(0, 1, "c1", pos, name, inp, rec)
    log.result(0, 1, "c1", pos, out)
    log.claim(0, 1, "c2")
    d, _ = decide_tool(view_of(log, task()), frozenset(), pos, name, canonical_json(inp), cur)
    assert d.action is ToolAction.REUSE
    assert d.result == ToolResult(output=out)


# --- rule: an intent without a result reruns only if both declarations say safe ----------------


@given(
    name=names,
    inp=inputs,
    rec=replays,
    cur=replays,
    chunks=st.lists(inputs, max_size=3),
)
def test_intent_without_result_reruns_only_if_both_safe(
    name: str, inp: Any, rec: Replay, cur: Replay, chunks: list[Any]
) -> None:
    log = Log()
    log.claim(0, 1, "c1")
    log.intent(0, 1, "c1", 0, name, inp, rec)
    for c in chunks:
        log.add(ToolOutputRecord(0, 1, "c1", 0, c))
    log.claim(0, 1, "c2")
    d, _ = decide_tool(view_of(log, task()), frozenset(), 0, name, canonical_json(inp), cur)
    if rec is Replay.SAFE and cur is Replay.SAFE:
        assert d.action is ToolAction.RERUN
    else:
        assert d.action is ToolAction.RECORD
        assert d.result == ToolResult(interrupted=True, partial=tuple(chunks))
        assert not d.write_intent


# --- rule: a different call at a recorded position is a mismatch and writes nothing ------------


@given(name=names, inp=inputs, other_name=names, other_inp=inputs, cur=replays, done=st.booleans())
def test_different_call_at_recorded_position_is_mismatch(
    name: str, inp: Any, other_name: str, other_inp: Any, cur: Replay, done: bool
) -> None:
    log = Log()
    log.claim(0, 1, "c1")
    log.intent(0, 1, "c1", 0, name, inp, Replay.SAFE)
    if done:
        log.result(0, 1, "c1", 0, 1)
    log.claim(0, 1, "c2")
    view = view_of(log, task())
    d, consumed = decide_tool(view, frozenset(), 0, other_name, canonical_json(other_inp), cur)
    same = other_name == name and canonical_json(other_inp) == canonical_json(inp)
    assert (d.action is ToolAction.MISMATCH) is not same
    if not same:
        assert consumed == frozenset() and d.result is None
        assert decide_model(view, 0).action is ModelAction.MISMATCH


@given(resp=inputs, name=names, inp=inputs)
def test_tool_at_model_position_is_mismatch(resp: Any, name: str, inp: Any) -> None:
    log = Log()
    log.claim(0, 1, "c1")
    log.add(ModelRecord(0, 1, "c1", 0, resp))
    log.claim(0, 1, "c2")
    view = view_of(log, task())
    d, _ = decide_tool(view, frozenset(), 0, name, canonical_json(inp), Replay.SAFE)
    assert d.action is ToolAction.MISMATCH
    m = decide_model(view, 0)
    assert m.action is ModelAction.REUSE and m.response == resp


# --- rule: a new attempt runs safe calls and model requests fresh ------------------------------


@given(
    calls=st.lists(st.tuples(names, inputs), min_size=1, max_size=4),
    resp=inputs,
    attempt=st.integers(2, 4),
)
def test_new_attempt_runs_safe_calls_and_models_fresh(
    calls: list[tuple[str, Any]], resp: Any, attempt: int
) -> None:
    log = Log()
    log.claim(0, 1, "c1")
    log.add(ModelRecord(0, 1, "c1", 0, resp))
    for pos, (name, inp) in enumerate(calls, start=1):
        log.intent(0, 1, "c1", pos, name, inp, Replay.SAFE)
        log.result(0, 1, "c1", pos, "old")
    log.claim(0, attempt, "c2", "n2")
    view = view_of(log, task(attempt=attempt, nonce="n2"))
    assert decide_model(view, 0).action is ModelAction.RUN
    consumed: frozenset[int] = frozenset()
    for pos, (name, inp) in enumerate(calls, start=1):
        d, consumed = decide_tool(view, consumed, pos, name, canonical_json(inp), Replay.SAFE)
        assert d.action is ToolAction.RUN


# --- rule: a retry honours earlier unsafe intents, matched by name and input, once each -------


@given(
    earlier=st.lists(st.tuples(names, inputs, st.booleans()), min_size=1, max_size=4),
    current=st.lists(st.tuples(names, inputs, replays), min_size=1, max_size=6),
    offset=st.integers(0, 2),
)
def test_retry_honours_unsafe_starts_by_name_and_input(
    earlier: list[tuple[str, Any, bool]], current: list[tuple[str, Any, Replay]], offset: int
) -> None:
    log = Log()
    log.claim(0, 1, "c1")
    for pos, (name, inp, has_result) in enumerate(earlier):
        log.intent(0, 1, "c1", pos, name, inp, Replay.UNSAFE)
        if has_result:
            log.result(0, 1, "c1", pos, f"done-{pos}")
    log.claim(0, 2, "c2", "n2")
    view = view_of(log, task(attempt=2, nonce="n2"))
    unconsumed = [(n, canonical_json(i), r, p) for p, (n, i, r) in enumerate(earlier)]
    consumed: frozenset[int] = frozenset()
    for pos, (name, inp, rp) in enumerate(current, start=offset):
        d, consumed = decide_tool(view, consumed, pos, name, canonical_json(inp), rp)
        same = [u for u in unconsumed if u[:2] == (name, canonical_json(inp))]
        # The start at this position first; an unsafe call also takes one from elsewhere, a call
        # declared safe does not (so it cannot use up the honour an unsafe call needs).
        match = next((u for u in same if u[3] == pos), None)
        if match is None and rp is Replay.UNSAFE and same:
            match = same[0]
        if match is None:
            assert d.action is ToolAction.RUN
            continue
        unconsumed.remove(match)
        assert d.action is ToolAction.RECORD and d.write_intent
        if match[2]:
            assert d.result == ToolResult(output=f"done-{match[3]}")
        else:
            assert d.result is not None and d.result.interrupted


@given(name=names, inp=inputs)
def test_retry_does_not_honour_safe_intents(name: str, inp: Any) -> None:
    log = Log()
    log.claim(0, 1, "c1")
    log.intent(0, 1, "c1", 0, name, inp, Replay.SAFE)
    log.claim(0, 2, "c2", "n2")
    view = view_of(log, task(attempt=2, nonce="n2"))
    d, _ = decide_tool(view, frozenset(), 0, name, canonical_json(inp), Replay.UNSAFE)
    assert d.action is ToolAction.RUN


# --- rule: model responses are reused at their position within the attempt -------------------


@given(resps=st.lists(inputs, min_size=1, max_size=5), extra=st.integers(0, 3))
def test_model_reuse_by_position_within_attempt(resps: list[Any], extra: int) -> None:
    log = Log()
    log.claim(0, 1, "c1")
    for pos, r in enumerate(resps):
        log.add(ModelRecord(0, 1, "c1", pos, r))
    log.claim(0, 1, "c2")
    view = view_of(log, task())
    for pos, r in enumerate(resps):
        d = decide_model(view, pos)
        assert d.action is ModelAction.REUSE and d.response == r
    assert decide_model(view, len(resps) + extra).action is ModelAction.RUN


# --- journal(): tail judgements and the restart limit ------------------------------------------


@given(later=st.integers(1, 3), kind=st.sampled_from(["claim", "commit"]))
def test_tail_of_later_iteration_is_stale(later: int, kind: str) -> None:
    rec: JournalRecord = (
        ClaimRecord(1 + later, 1, "c", "nx")
        if kind == "claim"
        else CommitRecord(1 + later, 1, "c", "nx", CommitAction.CONTINUE)
    )
    assert judge_tail((9, rec), task(iteration=1)).kind is TailKind.STALE


@given(action=st.sampled_from(list(CommitAction)))
def test_own_commit_at_tail_is_committed(action: CommitAction) -> None:
    rec = CommitRecord(2, 1, "c", "n1", action)
    assert judge_tail((9, rec), task(iteration=2)).kind is TailKind.COMMITTED
    other = attrs.evolve(rec, nonce="other")
    assert judge_tail((9, other), task(iteration=2)).kind is not TailKind.COMMITTED


@given(
    pattern=st.lists(st.sampled_from(["claim", "claim_prev", "model", "pause"]), max_size=8),
    limit=st.integers(1, 6),
)
def test_restart_limit_counts_claims_of_the_iteration_in_a_row(
    pattern: list[str], limit: int
) -> None:
    log = Log()
    for k, kind in enumerate(pattern):
        if kind == "claim":
            log.claim(1, 1, f"c{k}")
        elif kind == "claim_prev":
            log.claim(0, 1, f"c{k}")
        elif kind == "model":
            log.add(ModelRecord(1, 1, f"c{k}", k, None))
        else:
            log.add(CommitRecord(1, 1, f"c{k}", f"n{k}", CommitAction.PAUSE))
    tail = pattern[-limit:] if limit <= len(pattern) else None
    expected = tail is not None and all(k == "claim" for k in tail)
    assert restart_limit_reached(log.entries, 1, limit) is expected


def test_pause_is_a_commit_point_and_positions_continue() -> None:
    log = Log()
    log.add(CommitRecord(0, 1, "c0", "n0", CommitAction.CONTINUE, state="s0"))
    log.claim(1, 1, "c1", "n1")
    log.add(ModelRecord(1, 1, "c1", 0, "m"))
    log.intent(1, 1, "c1", 1, "send", 1, Replay.UNSAFE)
    log.result(1, 1, "c1", 1, "sent")
    log.add(CommitRecord(1, 1, "c1", "n1", CommitAction.PAUSE, state="s1"))
    t = TaskIdentity(RUN, STEP, 1, 1, "n2", 1)
    plan = plan_claim(log.entries, t, 5, full=False)
    assert plan.kind is PlanKind.PROCEED and plan.view is not None
    assert plan.view.call_offset == 2
    assert plan.view.calls == {}
    assert plan.view.base is not None and plan.view.base[1].state == "s1"  # type: ignore[union-attr]
    # the paused dispatch itself, redelivered late, is stale
    assert plan_claim(log.entries, attrs.evolve(t, nonce="n1"), 5, full=False).kind is (
        PlanKind.COMMITTED
    )


# --- the whole: at most one start per unsafe call, over any history of crashes and retries ----

Script = list[tuple[str, str, Any, Replay]]  # (kind, name, input, replay); kind model|tool

scripts = st.lists(
    st.one_of(
        st.tuples(st.just("model"), st.just(""), st.just(None), st.just(Replay.SAFE)),
        st.tuples(st.just("tool"), names, inputs, replays),
    ),
    min_size=1,
    max_size=5,
)


@attrs.define
class Sim:
    """A mirror of the handle's writes over the pure rules: one delivery at a time."""

    log: Log = attrs.field(factory=Log)
    starts: dict[int, int] = attrs.field(factory=dict)
    next_claim: int = 0

    def deliver(self, script: Script, attempt: int, crash_at: int | None) -> str:
        """Run the script; ``crash_at`` counts writes (and fn starts) before the crash."""
        budget = [crash_at if crash_at is not None else 10**9]

        def spend() -> bool:
            budget[0] -= 1
            return budget[0] < 0

        t = TaskIdentity(RUN, STEP, 0, attempt, f"n{attempt}", None)
        plan = plan_claim(self.log.entries, t, 3, full=True)
        if plan.kind is not PlanKind.PROCEED:
            return plan.kind.value
        assert plan.view is not None
        self.next_claim += 1
        cid = f"c{self.next_claim}"
        if spend():
            return "crash"
        self.log.claim(0, attempt, cid, t.nonce)
        if plan.restart_limit:
            self.log.add(CommitRecord(0, attempt, cid, t.nonce, CommitAction.FAIL))
            return "restart_limit"
        consumed: frozenset[int] = frozenset()
        for pos, (kind, name, inp, rp) in enumerate(script):
            if kind == "model":
                m = decide_model(plan.view, pos)
                assert m.action is not ModelAction.MISMATCH
                if m.action is ModelAction.RUN:
                    if spend():
                        return "crash"
                    self.log.add(ModelRecord(0, attempt, cid, pos, f"m{pos}"))
                continue
            d, consumed = decide_tool(plan.view, consumed, pos, name, canonical_json(inp), rp)
            assert d.action is not ToolAction.MISMATCH
            if d.action is ToolAction.REUSE:
                continue
            if d.action is ToolAction.RECORD:
                if d.write_intent:
                    if spend():
                        return "crash"
                    self.log.intent(0, attempt, cid, pos, name, inp, rp)
                if spend():
                    return "crash"
                self.log.add(ToolResultRecord(0, attempt, cid, pos, interrupted=True))
                continue
            if d.action is ToolAction.RUN:
                if spend():
                    return "crash"
                self.log.intent(0, attempt, cid, pos, name, inp, rp)
            if spend():
                return "crash"
            if rp is Replay.UNSAFE:
                self.starts[pos] = self.starts.get(pos, 0) + 1
            if spend():
                return "crash"
            self.log.result(0, attempt, cid, pos, f"out{pos}")
        if spend():
            return "crash"
        self.log.add(CommitRecord(0, attempt, cid, t.nonce, CommitAction.COMPLETE))
        return "done"


@settings(max_examples=300)
@given(
    script=scripts,
    crashes=st.lists(st.tuples(st.integers(0, 12), st.booleans()), max_size=8),
)
def test_unsafe_calls_start_at_most_once_and_the_journal_checks(
    script: Script, crashes: list[tuple[int, bool]]
) -> None:
    sim = Sim()
    attempt = 1
    for crash_at, new_attempt in crashes:
        outcome = sim.deliver(script, attempt, crash_at)
        if outcome == "done":
            break
        if new_attempt or outcome == "restart_limit":
            attempt += 1
    else:
        assert sim.deliver(script, attempt, None) in ("done", "restart_limit")
    unsafe_positions = {
        p for p, (k, _, _, rp) in enumerate(script) if k == "tool" and rp is Replay.UNSAFE
    }
    for pos, n in sim.starts.items():
        assert pos in unsafe_positions
        # Identical unsafe calls may share an earlier start (matched by name and input), so the
        # bound is per call identity: never more starts than occurrences in the script.
        name, inp = script[pos][1], canonical_json(script[pos][2])
        same = sum(
            1
            for k, nm, i, rp in script
            if k == "tool" and rp is Replay.UNSAFE and nm == name and canonical_json(i) == inp
        )
        assert n <= 1 or same > 1
    total_by_identity: dict[tuple[str, str], int] = {}
    for pos, n in sim.starts.items():
        ident = (script[pos][1], canonical_json(script[pos][2]))
        total_by_identity[ident] = total_by_identity.get(ident, 0) + n
    for (name, inp), n in total_by_identity.items():
        occurrences = sum(
            1
            for k, nm, i, rp in script
            if k == "tool" and rp is Replay.UNSAFE and nm == name and canonical_json(i) == inp
        )
        assert n <= occurrences
    report = check(sim.log.entries)
    assert report.ok, report.render()


# --- rule: an iteration ended by an earlier attempt is adopted, never done again ---------------


@given(action=st.sampled_from([CommitAction.CONTINUE, CommitAction.COMPLETE]))
def test_iteration_ended_by_an_earlier_attempt_is_adopted(action: CommitAction) -> None:
    # Attempt 1 committed after the engine had already given up on it (a step timeout, or a
    # holder that failed outside the journal) and dispatched attempt 2: attempt 2 must answer
    # with attempt 1's commit, not go silent (Stale) and not do the turn again.
    log = Log()
    log.claim(0, 1, "c1", "n1")
    log.intent(0, 1, "c1", 0, "send", {"to": "ops"}, Replay.UNSAFE)
    log.result(0, 1, "c1", 0, {"sent": True})
    seq = log.add(CommitRecord(0, 1, "c1", "n1", action))
    plan = plan_claim(log.entries, task(attempt=2, nonce="n2"), 5, full=True)
    assert plan.kind is PlanKind.ADOPT
    assert plan.commit is not None and plan.commit[0] == seq
    # An older attempt arriving late is still stale, and so is the committing dispatch itself.
    log2 = Log()
    log2.claim(0, 2, "c2", "n2")
    log2.add(CommitRecord(0, 2, "c2", "n2", action))
    assert plan_claim(log2.entries, task(attempt=1, nonce="n1"), 5, full=True).kind is (
        PlanKind.STALE
    )


def test_the_rules_spell_a_tool_input_with_the_policys_canonical_text() -> None:
    """One spelling, one copy: the journal's canonical JSON is the policy's own function (no
    wrapper frame per tool call), and refuses what the policy refuses."""
    assert canonical_json is canonical_json_text
    assert canonical_json({"b": [1, True], "a": "é"}) == '{"a":"é","b":[1,true]}'
    with pytest.raises(ValueError, match="not a JSON number"):
        canonical_json({"x": float("nan")})
