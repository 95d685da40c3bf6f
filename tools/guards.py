"""Delete each guard in turn and run the tests that must catch it (``just guards``).

A guard is a line or a condition whose loss would break a promise (a fenced append, a claim that
fences earlier attempts, the engine's acceptance rule, a replay rule). For each guard in
:data:`GUARDS` this script

1. copies the checkout (the files git tracks, plus untracked ones it does not ignore, as they
   are in the working tree) to a scratch directory; the working tree is never written;
2. runs every named test once on the unmutated copy: they must all pass, or the table would
   mean nothing;
3. for each guard: applies its mutation to the copy (each piece of text must be found exactly
   once in ``dagnats_trio/``, wherever it lives now, so a refactor cannot silently turn a
   mutation into a no-op), clears the Hypothesis database, runs the guard's tests, and restores
   the file;
4. prints the table: guard, where the mutation landed, the tests that failed, the verdict
   (``caught`` when at least one named test failed, ``MISSED`` when none did, ``STALE`` when the
   text to mutate was not found exactly once), and the time of the run.

Exit status 0 only if the baseline is green and every guard is caught. Options: ``--only TEXT``
runs the guards whose name contains TEXT; ``--list`` prints the guards and their tests;
``--check`` only checks that every mutation applies and every named test exists (no test run;
``tests/guards/test_guard_table.py`` does this in the suite); ``--keep`` leaves the scratch copy.

The tests run with ``uv run --frozen`` in the scratch copy (a venv of its own, with the copy
installed), each run bounded by ``RUN_TIMEOUT_S``; a run that overruns counts as caught only if
a named test had already failed, and is reported as ``timeout``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "dagnats_trio"

#: Bound on one pytest run (the named tests of one guard; the baseline runs them all).
RUN_TIMEOUT_S = 900
#: Bound on ``git`` and ``uv sync`` in the scratch copy.
SETUP_TIMEOUT_S = 600


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (whitespace runs match any whitespace) with ``new``."""

    old: str
    new: str


@dataclass(frozen=True)
class Guard:
    name: str
    what: str  # the mutation, in words
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]  # pytest node ids, relative to the repo root


def _g(name: str, what: str, edits: Sequence[tuple[str, str]], tests: Sequence[str]) -> Guard:
    return Guard(name, what, tuple(Edit(o, n) for o, n in edits), tuple(tests))


JH = "tests/journal/test_journal_handle.py"
BP = "tests/journal/test_batched_pairs.py"
RR = "tests/journal/test_replay_rules.py"
WN = "tests/worker/test_worker_nats.py"
EN = "tests/engine/test_engine_nats.py"
ADV = "tests/engine/test_advance.py"
HC = "tests/guards/test_honour_chain.py"
MX = "tests/matrix/test_matrix.py"
PC = "tests/journal/test_predicted_claim.py"
SP = "tests/engine/test_start_path.py"
SK = "tests/engine/test_start_kills.py"

GUARDS: tuple[Guard, ...] = (
    _g(
        "Expected-sequence header",
        "the journal's append publishes with expected_last_subject_seq=None (record or batch)",
        [
            (
                "expected_last_subject_seq=self._last_seq,",
                "expected_last_subject_seq=None,",
            ),
            (
                "msgs, expected_last_subject_seq=self._last_seq",
                "msgs, expected_last_subject_seq=None",
            ),
        ],
        [
            f"{JH}::test_zombie_tool_write_is_fenced",
            f"{WN}::test_stalled_holder_is_fenced_by_its_successor",
            f"{BP}::test_a_zombies_group_is_fenced_whole[nats-message]",
            f"{BP}::test_a_zombies_group_is_fenced_whole[nats-batch]",
            "tests/worker/test_ack_next_stop.py::"
            "test_tasks_pulled_by_the_ack_of_a_stopped_worker_complete_once_and_it_is_fenced",
        ],
    ),
    _g(
        'Expected-sequence header, "0 = empty"',
        "expected_last_subject_seq=self._last_seq or None (a first claim on an empty journal is "
        "not fenced)",
        [
            (
                "expected_last_subject_seq=self._last_seq,",
                "expected_last_subject_seq=self._last_seq or None,",
            ),
            (
                "msgs, expected_last_subject_seq=self._last_seq",
                "msgs, expected_last_subject_seq=self._last_seq or None",
            ),
        ],
        [
            f"{MX}::test_matrix_nats[before_claim-stall]",
            f"{MX}::test_matrix_sim[before_claim-stall]",
        ],
    ),
    _g(
        "Claim identity: own record vs. fencing on a lost ack",
        "after a lost ack, any moved tail counts as our own write (dropped `tail.data == data`)",
        [
            (
                "if tail is not None and tail.seq > self._last_seq and tail.data == data:",
                "if tail is not None and tail.seq > self._last_seq:",
            )
        ],
        [
            f"{JH}::test_zombie_tool_write_is_fenced",
            f"{WN}::test_stalled_holder_is_fenced_by_its_successor",
        ],
    ),
    _g(
        "Claim identity: a unique id per claim",
        "open_journal: claim_id=ident.nonce (a zombie and its successor share the id)",
        [
            (
                "claim_id=env.new_id(),",
                "claim_id=ident.nonce,",
            )
        ],
        [
            f"{MX}::test_matrix_sim[after_tool_intent-stall]",
            f"{MX}::test_matrix_nats[after_tool_intent-stall]",
            f"{MX}::test_matrix_nats[inside_tool-stall]",
            f"{MX}::test_matrix_nats[after_tool_result-stall]",
        ],
    ),
    _g(
        "A claim fences earlier attempts",
        'plan_claim: deleted "attempt N of iteration i holds it -> STALE"',
        [
            (
                "if rec.attempt > task.attempt: return ClaimPlan( PlanKind.STALE,",
                "if False: return ClaimPlan( PlanKind.STALE,",
            )
        ],
        [f"{JH}::test_late_redelivery_of_an_earlier_attempt_is_stale"],
    ),
    _g(
        "A claim fences earlier iterations",
        'judge_tail and plan_claim: deleted "a later iteration owns the journal -> STALE"',
        [
            ("if rec.iteration > task.iteration:", "if False:"),
            ("if entries and entries[-1][1].iteration > i:", "if False:"),
        ],
        [
            f"{WN}::test_stale_redelivery_is_acked_without_an_event",
            f"{JH}::test_stale_redelivery_runs_nothing",
        ],
    ),
    _g(
        "Predicted claim: first deliveries only",
        "TaskContext.journal: every delivery claims on the predicted tail (a redelivery no "
        "longer reads the tail its predecessor's claim moved)",
        [
            (
                "first_delivery=self._delivery.num_delivered == 1,",
                "first_delivery=True,",
            )
        ],
        [
            f"{WN}::test_restart_limit_one_through_the_worker",
            f"{MX}::test_matrix_nats[after_claim-kill]",
        ],
    ),
    _g(
        "Predicted claim: the tail rules judge the predicted tail",
        "_predicted_view: a remembered commit is claimed after whatever judge_tail says of it",
        [
            (
                "if verdict.kind is TailKind.BASE: return empty_view(ident, base=predicted)",
                "if True: return empty_view(ident, base=predicted)",
            )
        ],
        [
            f"{PC}::test_a_known_commit_the_rules_would_not_claim_after_is_read[nats]",
            f"{PC}::test_a_known_commit_the_rules_would_not_claim_after_is_read[sim]",
        ],
    ),
    _g(
        "Audit: no write after the fencing claim",
        "journal.check: deleted the write-after-fenced rule",
        [("elif rec.claim_id != owner:", "elif False:")],
        ["tests/journal/test_check.py::test_each_violation_is_caught[write-after-fenced]"],
    ),
    _g(
        "Engine acceptance rule",
        "engine lifecycle: events applied whatever their dispatch",
        [
            (
                'elif ev.dispatch != st.dispatch: return self.drop("not the current dispatch")',
                'elif False: return self.drop("not the current dispatch")',
            )
        ],
        [
            f"{EN}::test_duplicate_continue_is_dropped",
            f"{ADV}::test_acceptance_rule_drops_other_dispatches",
        ],
    ),
    _g(
        "Engine acceptance: the nonce",
        "engine lifecycle: compares only (iteration, attempt), not the nonce",
        [
            (
                'elif ev.dispatch != st.dispatch: return self.drop("not the current dispatch")',
                "elif st.dispatch is None or (ev.dispatch.iteration, ev.dispatch.attempt) != "
                '(st.dispatch.iteration, st.dispatch.attempt): return self.drop("not the '
                'current dispatch")',
            )
        ],
        [f"{ADV}::test_acceptance_rule_drops_other_dispatches"],
    ),
    _g(
        "Engine acceptance: legacy_step_events=False",
        "engine lifecycle: deleted the drop of events without a dispatch",
        [
            (
                "if not self.ctx.legacy_step_events:",
                "if False:",
            )
        ],
        [f"{EN}::test_legacy_events_follow_the_flag[False]"],
    ),
    _g(
        "Engine acceptance of timers",
        "engine timer: deleted `ev.dispatch != st.dispatch`",
        [
            (
                "if ev.dispatch is None or ev.dispatch != st.dispatch:",
                "if ev.dispatch is None:",
            )
        ],
        [
            f"{ADV}::test_timeout_fails_attempt_as_retriable_and_drops_its_late_events",
            f"{ADV}::test_a_wait_timer_fired_again_is_dropped_even_while_the_step_waits_again",
        ],
    ),
    _g(
        "Restart limit",
        "restart_limit_reached: always False",
        [
            (
                "if restart_limit < 1 or len(entries) < restart_limit:",
                "if True:",
            )
        ],
        [f"{WN}::test_restart_limit_one_through_the_worker", f"{JH}::test_restart_limit"],
    ),
    _g(
        "Restart limit, off by one",
        "restart_limit_reached: looks at the last limit + 1 entries",
        [
            (
                "for _, r in entries[-restart_limit:]",
                "for _, r in entries[-(restart_limit + 1) :]",
            )
        ],
        [f"{RR}::test_restart_limit_counts_claims_of_the_iteration_in_a_row"],
    ),
    _g(
        "Replay (a): rerun an intent without a result even if a declaration says unsafe",
        "decide_tool: RERUN unconditionally",
        [
            (
                "if rec.intent.replay is Replay.SAFE and replay is Replay.SAFE:",
                "if True:",
            )
        ],
        [
            f"{JH}::test_kill_inside_tool_after_its_effect_leaves_the_intent_open",
            f"{JH}::test_redelivery_reruns_safe_and_interrupts_unsafe",
        ],
    ),
    _g(
        "Replay (a), only the current declaration checked",
        "decide_tool: `if replay is SAFE: RERUN`",
        [
            (
                "if rec.intent.replay is Replay.SAFE and replay is Replay.SAFE:",
                "if replay is Replay.SAFE:",
            )
        ],
        [f"{RR}::test_intent_without_result_reruns_only_if_both_safe"],
    ),
    _g(
        "Replay (a), only the recorded declaration checked",
        "decide_tool: `if rec.intent.replay is SAFE: RERUN`",
        [
            (
                "if rec.intent.replay is Replay.SAFE and replay is Replay.SAFE:",
                "if rec.intent.replay is Replay.SAFE:",
            )
        ],
        [f"{RR}::test_intent_without_result_reruns_only_if_both_safe"],
    ),
    _g(
        "Replay: a recorded result is reused",
        "decide_tool: deleted the REUSE rule",
        [
            (
                "if rec is not None and rec.result is not None: "
                "return ToolDecision(ToolAction.REUSE,",
                "if False: return ToolDecision(ToolAction.REUSE,",
            )
        ],
        [f"{JH}::test_redelivery_reuses_models_and_tools"],
    ),
    _g(
        "Replay (b): honour earlier attempts' unsafe starts",
        "_origins: return ()",
        [("return tuple(origins)", "return ()")],
        [f"{JH}::test_retry_runs_safe_and_models_fresh_and_honours_unsafe"],
    ),
    _g(
        "Replay (b): only unsafe intents are starts",
        "_origins: safe intents become starts too",
        [
            (
                "elif t.intent.replay is Replay.UNSAFE: origins.append(",
                "else: origins.append(",
            )
        ],
        [f"{RR}::test_retry_does_not_honour_safe_intents"],
    ),
    _g(
        "Replay (b): matched by name and input",
        "_first_match: name only",
        [
            (
                "if idx in consumed or o.name != name or o.input_json != input_json:",
                "if idx in consumed or o.name != name:",
            )
        ],
        [f"{RR}::test_retry_honours_unsafe_starts_by_name_and_input"],
    ),
    _g(
        "Replay (b): each start honoured once",
        "decide_tool: the match is not consumed",
        [("consumed = consumed | {match}", "consumed = consumed")],
        [
            f"{RR}::test_retry_honours_unsafe_starts_by_name_and_input",
            f"{HC}::test_third_attempt_runs_the_charge_nobody_started_nats",
            f"{HC}::test_third_attempt_runs_the_charge_nobody_started_sim",
        ],
    ),
    _g(
        "Replay (b): a safe call never takes the honour an unsafe call needs",
        "_first_match: the fallback match also for safe calls",
        [
            (
                "if fallback is None and replay is Replay.UNSAFE:",
                "if fallback is None:",
            )
        ],
        [f"{RR}::test_retry_honours_unsafe_starts_by_name_and_input"],
    ),
    _g(
        "Replay (b): a retry's honoured copy is not a start",
        "_origins: every unsafe intent of earlier attempts counts as a start (no chain rule)",
        [
            (
                "match = _first_match(prior, consumed, c, t.intent.name, key, t.intent.replay)",
                "match = None",
            )
        ],
        [
            f"{HC}::test_third_attempt_runs_the_charge_nobody_started_nats",
            f"{HC}::test_third_attempt_runs_the_charge_nobody_started_sim",
            f"{HC}::test_each_unsafe_call_starts_as_often_as_one_attempt_asks_for_it",
        ],
    ),
    _g(
        "Settlement of a plain step: only while the holder may write",
        "settle_delivery: deleted holder.check_writable() before a plain step's lifecycle event",
        [("holder.check_writable() t = holder.task", "t = holder.task")],
        ["tests/journal/test_settle.py::test_a_fenced_plain_holder_publishes_nothing"],
    ),
    _g(
        "A lost lease cancels the delivery",
        "DeliveryState.lose_lease: records why, but no longer cancels the delivery's scope",
        [
            (
                "self.lease_lost_because = because if self.scope is not None: self.scope.cancel()",
                "self.lease_lost_because = because",
            )
        ],
        [
            "tests/worker/test_delivery_nursery.py::test_a_helper_is_cancelled_when_the_lease_is_lost"
        ],
    ),
    _g(
        "The run's cancellation cancels the delivery",
        "DeliveryState.cancel: marks the holder cancelled, but no longer cancels its scope",
        [
            (
                "self.cancelled = True if self.scope is not None: self.scope.cancel()",
                "self.cancelled = True",
            )
        ],
        [
            "tests/worker/test_delivery_nursery.py::test_a_helper_is_cancelled_with_the_run",
            f"{WN}::test_cancel_announcement_cancels_the_handler",
        ],
    ),
    _g(
        "Model: read the tail first",
        "Journal.model: the tail check before the call replaced by a bare checkpoint",
        [
            (
                "await self._writer.check_tail()",
                "await trio.lowlevel.checkpoint()",
            )
        ],
        [f"{JH}::test_fenced_holder_writes_nothing_and_spends_no_model_call"],
    ),
    _g(
        "Model: only a fresh proof stands for the tail read",
        "FencedWriter._tail_proof_fresh: any earlier ack counts, however old",
        [
            (
                "return trio.current_time() - self._tail_proven_at < TAIL_PROOF_FRESH_S",
                "return True",
            )
        ],
        [
            f"{JH}::test_a_successor_claiming_after_the_bound_fences_the_old_holder_s_model_call",
            f"{JH}::test_fenced_holder_writes_nothing_and_spends_no_model_call",
        ],
    ),
    _g(
        "Model: a cancelled holder spends no model request on a fresh proof",
        "FencedWriter.check_tail: the fresh-proof path no longer checks for cancellation",
        [
            (
                "if self._tail_proof_fresh(): await trio.lowlevel.checkpoint_if_cancelled()",
                "if self._tail_proof_fresh():\n            pass",
            )
        ],
        [f"{JH}::test_a_fresh_tail_proof_costs_the_model_call_no_scheduler_pass"],
    ),
    _g(
        "Model: a holder whose lease was lost reads the tail",
        "FencedWriter._tail_proof_fresh: a lost lease no longer voids a fresh proof",
        [
            (
                "if self._holder.lease_lost_because or self._tail_proven_at is None:",
                "if self._tail_proven_at is None:",
            )
        ],
        [f"{JH}::test_a_holder_whose_lease_was_lost_reads_the_tail_however_fresh_its_claim"],
    ),
    _g(
        "Engine outbox: only the newest entry's effects leave it once stored",
        "stored_outbox: every entry loses its effects, an older one read from the store too",
        [
            (
                "return (*outbox[:-1], OutboxEntry(outbox[-1].seq))",
                "return tuple(OutboxEntry(e.seq) for e in outbox)",
            )
        ],
        [f"{ADV}::test_an_event_whose_effects_are_stored_keeps_its_seq_without_them"],
    ),
    _g(
        "Engine outbox: an entry keeps its effects until they are known stored",
        "_Working.finish: the newest entry's effects are dropped whether or not they are stored",
        [("if self.ctx.outbox_stored:", "if True:")],
        [f"{ADV}::test_an_event_whose_effects_are_stored_keeps_its_seq_without_them"],
    ),
    _g(
        "Engine: a start's snapshot is derived only from the definition it was made from",
        "Engine._derive_first: the current definition is used whatever its revision",
        [
            (
                "if current is not None and current[1] == event.definition_revision:",
                "if current is not None:",
            )
        ],
        [
            "tests/engine/test_first_snapshot.py::"
            "test_a_definition_registered_again_since_the_start_is_not_derived"
        ],
    ),
    _g(
        "Engine: a definition is stored before a snapshot names it",
        "EngineState._save: a save names the definition by reference without storing it first",
        [
            (
                "if new.definition is not None and not self._refs.stored(new.definition):",
                "if False:",
            )
        ],
        [
            "tests/engine/test_definition_ref.py::"
            "test_a_cold_engine_runs_the_definition_a_run_started_with",
            "tests/engine/test_definition_ref.py::test_each_save_names_the_definition_by_reference",
        ],
    ),
    _g(
        "Engine: a finished run's last event is counted applied once its run end is made",
        "Engine._handle: a run-ending event is counted applied by the history loop too",
        [
            (
                "if not self._ends_run(saved, snap):  # a run end counts it (_save_and_end)",
                "if True:",
            )
        ],
        [
            "tests/engine/test_run_ends.py::"
            "test_a_held_run_end_holds_back_no_other_run_and_counts_once_made",
        ],
    ),
    _g(
        "Engine: a snapshot too large to store fails its run, on the stored snapshot",
        "Engine._save_decided: the failure decided on the oversize snapshot, not the stored one",
        [
            (
                "failed = fail_too_large(snap, event, ctx,",
                "failed = fail_too_large(out.snapshot, event, ctx,",
            )
        ],
        [
            "tests/engine/test_snapshot_too_large.py::"
            "test_outputs_over_the_snapshot_bound_fail_the_run",
        ],
    ),
    _g(
        "Engine: the snapshot bound is the server's announced max_payload",
        "EngineState._save: the bound assumed to be the default 1 MiB, not read from the server",
        [
            (
                "bound = snapshot_max_bytes(self.transport.max_payload_bytes)",
                "bound = SNAPSHOT_MAX_BYTES",
            )
        ],
        [
            "tests/engine/test_snapshot_too_large.py::"
            "test_the_bound_is_the_servers_own_max_payload",
        ],
    ),
    _g(
        "Engine: a cancelled engine still makes the run ends it was handed",
        "RunEnds.run: the drain after a cancel is not shielded (so it is cancelled at once)",
        [
            (
                "trio.CancelScope(shield=True, deadline=trio.current_time() + RUN_ENDS_DRAIN_S)",
                "trio.CancelScope(shield=False)",
            )
        ],
        [
            "tests/engine/test_run_ends.py::"
            "test_a_cancelled_engine_still_makes_the_run_ends_it_was_handed",
        ],
    ),
    _g(
        "A definition reference resolves only to its own bytes",
        "DefinitionRefs._read: what is stored under a reference is taken without its hash checked",
        [("if hashlib.sha256(entry.value).hexdigest() != ref:", "if False:")],
        ["tests/engine/test_definition_ref.py::test_a_reference_that_names_other_bytes_is_refused"],
    ),
    _g(
        "Run index: a start indexed beside its read is indexed before its snapshot",
        "index_start: the run's index writes left out (only the definition's read is sent)",
        [
            (
                "layout.DEFS_BUCKET, event.workflow, index_msgs(entry, active=True)",
                "layout.DEFS_BUCKET, event.workflow, []",
            )
        ],
        [
            f"{SP}::test_a_start_killed_between_two_writes_is_listed_iff_its_snapshot_exists"
            "[nats-before-create]",
            f"{SP}::test_a_start_killed_between_two_writes_is_listed_iff_its_snapshot_exists"
            "[sim-before-task-and-started]",
        ],
    ),
    _g(
        "Engine: a start the service dispatched has its tasks repeated, never decided again",
        "decide: the outbox entry of a start the service decided is not looked for",
        [("decided = service_start_entry(snapshot)", "decided = None")],
        [
            "tests/engine/test_first_dispatch.py::"
            "test_the_engine_repeats_the_services_tasks_and_dispatches_nothing_more",
            "tests/engine/test_start_kills.py::"
            "test_a_start_killed_on_its_early_path_is_listed_iff_its_snapshot_exists"
            "[keyed-before-task-and-started]",
        ],
    ),
    _g(
        "Service: a start's first dispatch is saved before its task is sent",
        "start_dispatched: the task and workflow.started published before the snapshot is created",
        [
            (
                "msgs = [task_publish_msg(e) for e in out.effects if isinstance(e, PublishTask)]",
                "msgs = [task_publish_msg(e) for e in out.effects if isinstance(e, PublishTask)]\n"
                "    await transport.publish_many(msgs)",
            )
        ],
        [
            f"{SP}::test_a_start_killed_between_two_writes_is_listed_iff_its_snapshot_exists"
            "[sim-before-create]",
        ],
    ),
    _g(
        "Service: a dispatched start names its snapshot apart from an undispatched one",
        "start_dispatched: the created snapshot's revision published as snapshot_revision (an "
        "engine then decides the start again on an undispatched first snapshot)",
        [
            (
                "event = attrs.evolve(event, dispatched=StartDispatch(revision, tuple(drawn)))",
                "event = attrs.evolve(event, snapshot_revision=revision)",
            )
        ],
        [
            "tests/engine/test_first_snapshot.py::"
            "test_a_started_run_is_dispatched_without_reading_its_snapshot",
            "tests/engine/test_start_dispatched.py::"
            "test_the_engine_settles_a_dispatched_start_without_a_second_dispatch",
            "tests/engine/test_start_derived.py::test_the_derived_snapshot_is_the_stored_one",
        ],
    ),
    _g(
        "Engine: a dispatched start is rebuilt only from exactly the ids its decision drew",
        "first_dispatch_again: the count of ids drawn again is not checked",
        [
            (
                "if out is None or out.snapshot is None or drawn.used != len(drawn.ids):",
                "if out is None or out.snapshot is None:",
            )
        ],
        [
            "tests/engine/test_start_derived.py::"
            "test_the_dispatch_is_made_again_only_from_exactly_the_ids_drawn",
        ],
    ),
    _g(
        "Run index: a start refused after its early index takes the index back",
        "index_start: the unindex of a start whose definition read failed deleted",
        [
            (
                "await unindex_run(transport, event.run_id)\n        raise\n",
                "raise\n",
            )
        ],
        [f"{SP}::test_a_refused_start_leaves_no_index_entry"],
    ),
    _g(
        "Run index: an early index stands only for the entry it wrote",
        "create_snapshot: an IndexedStart skips the index whatever entry it names",
        [
            (
                "if indexed is None or indexed.entry != index_entry(snapshot):",
                "if indexed is None:",
            )
        ],
        [f"{SP}::test_a_definition_stored_under_another_name_is_indexed_under_its_own"],
    ),
    _g(
        "Start sweep: a start already stored is never published again",
        "StartSweep._examine: the run's history is not read before its start is published",
        [("if await self._start_stored(run_id):", "if False:")],
        [
            f"{SK}::test_an_unkeyed_start_killed_after_its_snapshot_completes_once[announced]",
            f"{SK}::test_a_live_start_is_never_published_by_the_sweep",
        ],
    ),
    _g(
        "Start sweep: only a start not applied is looked for",
        "start_state: a start the service dispatched counts as applied at once",
        [
            (
                "if not snapshot.started or service_start_entry(snapshot) is not None:",
                "if not snapshot.started:",
            )
        ],
        [
            f"{SK}::test_an_unkeyed_start_killed_after_its_snapshot_completes_once[dispatch]",
            "tests/engine/test_start_sweep_rules.py::"
            "test_a_start_the_service_dispatched_is_unapplied_until_an_event_is_applied",
        ],
    ),
)


# --- applying a mutation ------------------------------------------------------------------------


def _pattern(old: str) -> re.Pattern[str]:
    """``old`` as a regex: its text literal, any run of whitespace (or none, next to
    punctuation that a formatter may wrap at) matching any whitespace."""
    tokens = [t for t in re.split(r"\s+", old.strip()) if t]
    return re.compile(r"\s*".join(re.escape(t) for t in tokens))


@dataclass(frozen=True)
class Hit:
    path: Path  # relative to the tree
    line: int
    start: int
    end: int


def find(tree: Path, old: str) -> list[Hit]:
    pat = _pattern(old)
    hits: list[Hit] = []
    for path in sorted((tree / PACKAGE).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for m in pat.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            hits.append(Hit(path.relative_to(tree), line, m.start(), m.end()))
    return hits


def plan(tree: Path, guard: Guard) -> tuple[list[tuple[Hit, Edit]], str]:
    """The place of each edit, or an error saying which text was not found exactly once."""
    placed: list[tuple[Hit, Edit]] = []
    for edit in guard.edits:
        hits = find(tree, edit.old)
        if len(hits) != 1:
            where = ", ".join(f"{h.path}:{h.line}" for h in hits) or "nowhere"
            return [], f"{edit.old!r} found {len(hits)} times ({where})"
        placed.append((hits[0], edit))
    return placed, ""


def apply(tree: Path, placed: list[tuple[Hit, Edit]]) -> dict[Path, str]:
    """Apply the edits; return the original text of each file changed."""
    originals: dict[Path, str] = {}
    # Later offsets first, so earlier ones stay valid when two edits share a file.
    for hit, edit in sorted(placed, key=lambda p: (str(p[0].path), -p[0].start)):
        path = tree / hit.path
        text = path.read_text(encoding="utf-8")
        originals.setdefault(path, text)
        path.write_text(text[: hit.start] + edit.new + text[hit.end :], encoding="utf-8")
    return originals


def restore(originals: dict[Path, str]) -> None:
    for path, text in originals.items():
        path.write_text(text, encoding="utf-8")


# --- the named tests exist ----------------------------------------------------------------------


def missing_tests(tree: Path, node_ids: Sequence[str]) -> list[str]:
    """Node ids whose file or test function does not exist (parameters are not checked)."""
    missing: list[str] = []
    defined: dict[str, set[str]] = {}
    for node in node_ids:
        file, _, name = node.partition("::")
        if not name and (tree / file).exists():
            continue  # a whole file or directory
        func = name.split("[", 1)[0]
        if file not in defined:
            path = tree / file
            if not path.is_file():
                defined[file] = set()
            else:
                mod = ast.parse(path.read_text(encoding="utf-8"))
                defined[file] = {
                    n.name
                    for n in ast.walk(mod)
                    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                }
        if func not in defined[file]:
            missing.append(node)
    return missing


# --- running the tests --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    failed: tuple[str, ...]
    passed: int
    seconds: float
    timed_out: bool
    output: str


def _git(*args: str) -> str:
    """``git args`` in the checkout; its output (file names as the file system spells them)."""
    out = subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, timeout=SETUP_TIMEOUT_S
    ).stdout
    return os.fsdecode(out)


def _copy_tree(dest: Path) -> str:
    """Copy the checkout to ``dest``; return its commit (with ``+dirty`` for local changes)."""
    files = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in files:
        if not name:
            continue
        rel = Path(name)
        src = REPO / rel
        if not src.is_file():  # deleted in the working tree
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    commit = _git("rev-parse", "--short", "HEAD").strip()
    dirty = _git("status", "--porcelain", "--untracked-files=no").strip()
    return commit + ("+dirty" if dirty else "")


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)  # the scratch copy has a venv of its own
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    return env


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        sys.exit("guards: no uv on PATH (run it as `./uvw run just guards`)")
    return uv


def _node_id(case: ET.Element) -> str:
    classname = case.get("classname", "")
    parts = classname.split(".")
    # "tests.journal.test_x" or "tests.journal.test_x.TestClass"
    for cut in range(len(parts), 0, -1):
        file = "/".join(parts[:cut]) + ".py"
        if (REPO / file).is_file():
            rest = parts[cut:]
            return "::".join([file, *rest, case.get("name", "")])
    return f"{classname}::{case.get('name', '')}"


def run_tests(tree: Path, node_ids: Sequence[str]) -> RunResult:
    shutil.rmtree(tree / ".hypothesis", ignore_errors=True)  # no example remembered between runs
    report = tree / ".guards-junit.xml"
    report.unlink(missing_ok=True)
    cmd = [
        _uv(),
        "run",
        "--frozen",
        "--quiet",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rfE",
        f"--junitxml={report}",
        *node_ids,
    ]
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=tree,
        env=_child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its nats-servers die with it on a timeout
    )
    timed_out = False
    try:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    seconds = time.monotonic() - started
    failed: list[str] = []
    passed = 0
    if report.is_file():
        for case in ET.parse(report).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(_node_id(case))
            elif case.find("skipped") is None:
                passed += 1
    elif proc.returncode not in (0, None) and not timed_out:
        failed.append(f"(pytest exited {proc.returncode} without a report)")
    return RunResult(tuple(failed), passed, seconds, timed_out, output)


# --- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    guard: Guard
    where: str
    result: RunResult | None
    verdict: str


def _short(node: str) -> str:
    return node.rsplit("/", 1)[-1]


def table(rows: Sequence[Row]) -> str:
    out = [
        "| Guard | Mutation (where, what) | Tests run | Tests that failed | Verdict | Time |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        res = row.result
        failed = ", ".join(f"`{_short(n)}`" for n in res.failed) if res else ""
        secs = f"{res.seconds:.0f} s" if res else "-"
        ran = res.passed + len(res.failed) if res else 0
        out.append(
            f"| {row.guard.name} | `{row.where}`: {row.guard.what} | {ran} "
            f"| {failed or 'none'} | {row.verdict} | {secs} |"
        )
    return "\n".join(out)


def _select(only: str | None) -> tuple[Guard, ...]:
    if only is None:
        return GUARDS
    chosen = tuple(g for g in GUARDS if only.lower() in g.name.lower())
    if not chosen:
        sys.exit(f"guards: no guard's name contains {only!r}")
    return chosen


def check(tree: Path, guards: Sequence[Guard]) -> list[str]:
    """Problems that would make the table wrong: a mutation that no longer applies, a test
    that no longer exists."""
    problems: list[str] = []
    for guard in guards:
        _, err = plan(tree, guard)
        if err:
            problems.append(f"{guard.name}: {err}")
        for node in missing_tests(tree, guard.tests):
            problems.append(f"{guard.name}: no test {node}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run only the guards whose name contains this text")
    parser.add_argument("--list", action="store_true", help="print the guards and their tests")
    parser.add_argument("--check", action="store_true", help="check mutations and tests only")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy")
    parser.add_argument(
        "--tests",
        nargs="+",
        metavar="NODE",
        help="run these tests instead of each guard's own (to find which tests catch a guard)",
    )
    args = parser.parse_args(argv)
    guards = _select(args.only)
    if args.tests:
        guards = tuple(dataclasses.replace(g, tests=tuple(args.tests)) for g in guards)

    if args.list:
        for guard in guards:
            print(f"{guard.name}: {guard.what}")
            for node in guard.tests:
                print(f"    {node}")
        return 0
    problems = check(REPO, guards)
    for problem in problems:
        print(f"guards: {problem}", file=sys.stderr)
    if args.check:
        print(f"guards: {len(guards)} guard(s), {len(problems)} problem(s)")
        return 1 if problems else 0

    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="dagnats-guards-"))
    try:
        commit = _copy_tree(scratch)
        print(f"guards: commit {commit}, scratch copy {scratch}", flush=True)
        every = sorted({node for g in guards for node in g.tests})
        base = run_tests(scratch, every)
        print(
            f"guards: baseline (no mutation): {base.passed} passed, {len(base.failed)} failed "
            f"in {base.seconds:.0f} s",
            flush=True,
        )
        if base.failed or base.timed_out:
            print(base.output[-4000:], file=sys.stderr)
            print("guards: the baseline is not green; no table", file=sys.stderr)
            return 1
        rows: list[Row] = []
        for n, guard in enumerate(guards, 1):
            placed, err = plan(scratch, guard)
            if err:
                rows.append(Row(guard, "?", None, f"STALE ({err})"))
                print(f"guards: [{n}/{len(guards)}] {guard.name}: STALE: {err}", flush=True)
                continue
            where = ", ".join(f"{h.path.as_posix()}:{h.line}" for h, _ in placed)
            originals = apply(scratch, placed)
            try:
                res = run_tests(scratch, guard.tests)
            finally:
                restore(originals)
            verdict = "caught" if res.failed else "MISSED"
            if res.timed_out:
                verdict += f" (timeout after {RUN_TIMEOUT_S} s)"
            rows.append(Row(guard, where, res, verdict))
            print(
                f"guards: [{n}/{len(guards)}] {guard.name}: {verdict}, "
                f"{len(res.failed)} of {len(res.failed) + res.passed} test(s) failed "
                f"in {res.seconds:.0f} s",
                flush=True,
            )
        total = time.monotonic() - started
        print()
        print(
            f"Guard table at commit {commit}; baseline: {base.passed} passed "
            f"in {base.seconds:.0f} s:"
        )
        print()
        print(table(rows))
        print()
        missed = [r for r in rows if r.verdict != "caught"]
        print(
            f"guards: {len(rows) - len(missed)} of {len(rows)} caught; total {total / 60:.1f} min"
        )
        return 1 if missed else 0
    finally:
        if args.keep:
            print(f"guards: kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
