"""The NATS layout of DESIGN.md: stream, subject, durable and bucket names. Pure: no I/O.

Subjects embed run and step ids as single tokens, so ids are restricted to ``[A-Za-z0-9_-]``;
the one validator is :func:`dagnats_trio.protocol.check_id` (a dot or wildcard in an id would
address other runs' messages). Callers validate before they build a name here. Provisioning the
streams and buckets named here is the transport's job (:func:`dagnats_trio.transport.provision`).
"""

from __future__ import annotations

HISTORY_STREAM = "WORKFLOW_HISTORY"
#: Task messages, read by one durable pull consumer per task type. A limits stream (not a work
#: queue): an ack removes nothing, so it writes no fsynced tombstone; a run's tasks go when the
#: run ends (``engine._run_end``) or with the run (a purge). Stores made before keep theirs a
#: work queue (``transport.provision``).
TASK_STREAM = "TASK_QUEUES"
#: Durable timers, read by the engines' one durable pull consumer (``TIMER_DURABLE``). A limits
#: stream (not a work queue), as the task stream: a fired timer's ack removes nothing; a run's
#: timers go when the run ends (``engine._run_end``) or with the run (a purge). Stores made
#: before keep theirs a work queue (``transport.provision``).
TIMER_STREAM = "SLEEP_TIMERS"
JOURNAL_STREAM = "AGENT_JOURNAL"
#: One message per run, written when it is created: the stream sequence is the start order.
RUN_INDEX_STREAM = "RUN_INDEX"
#: One message per run that may be running (removed when it finishes): what ``?status=running``
#: reads, so it costs what the running runs cost.
RUN_ACTIVE_STREAM = "RUN_ACTIVE"

DEFS_BUCKET = "workflow_defs"
RUNS_BUCKET = "workflow_runs"
CHECKPOINTS_BUCKET = "checkpoints"
SIGNALS_BUCKET = "signals"
INPUTS_BUCKET = "inputs"
#: One key per task type: the last time a worker said it polls that type (``worker_poll_key``).
#: Keys of types no worker serves any more go after :data:`WORKER_POLLS_MAX_AGE_S`.
WORKER_POLLS_BUCKET = "worker_polls"

ENGINE_DURABLE = "orchestrator"
TIMER_DURABLE = "timers"

JOURNAL_MAX_AGE_S = 30 * 24 * 3600.0
#: How long a finished input submission stays (the window in which a repeated request id is
#: recognised): a per-message TTL on the write that settles it. Queued and placed submissions
#: carry none, so they live as long as their step.
INPUTS_DEDUPE_TTL_S = 7 * 24 * 3600
HISTORY_DUPLICATE_WINDOW_S = 120.0
WORKER_POLLS_MAX_AGE_S = 24 * 3600.0


def history_subject(run_id: str) -> str:
    return f"history.{run_id}"


def task_subject(task_type: str, run_id: str) -> str:
    return f"task.{task_type}.{run_id}"


def task_filter(task_type: str) -> str:
    return f"task.{task_type}.*"


def run_tasks_filter(run_id: str) -> str:
    """Every task subject of one run, whatever its task type (what a run's end purges)."""
    return f"task.*.{run_id}"


def worker_durable(task_type: str) -> str:
    return f"workers-{task_type}"


def timer_subject(run_id: str, step_id: str) -> str:
    return f"sleep.{run_id}.{step_id}"


def run_timers_filter(run_id: str) -> str:
    """Every timer subject of one run, whatever its step (what a run's end purges)."""
    return f"sleep.{run_id}.*"


def journal_subject(run_id: str, step_id: str) -> str:
    return f"journal.{run_id}.{step_id}"


def cancel_subject(run_id: str) -> str:
    return f"cancel.{run_id}"


def preview_subject(run_id: str, step_id: str) -> str:
    """Where ``put_stream`` sends its live preview (core NATS, not a record)."""
    return f"preview.{run_id}.{step_id}"


def run_index_subject(run_id: str) -> str:
    return f"runindex.{run_id}"


def run_active_subject(run_id: str) -> str:
    return f"runactive.{run_id}"


def sentinel_subject(stream: str) -> str:
    """The subject of ``stream``'s sentinel: one message that no run writes, purges or reads, so
    the stream never empties (``transport.provision``, :data:`SENTINEL_STREAMS`)."""
    return f"sentinel.{stream}"


#: Streams that a run's end purges (``engine._run_end``), each holding a sentinel. A purge that
#: empties a file stream makes nats-server remove its block file, create a new one and fsync a
#: tombstone into it (to keep the last sequence): a file created and one removed per purge, on
#: the disk the next run's writes wait for. A purge that leaves a message behind only writes its
#: tombstones into the block there is (one fsync under ``sync_interval: always``, as before).
#: None of them may have a message age limit (the sentinel would expire).
SENTINEL_STREAMS = (TASK_STREAM, TIMER_STREAM, RUN_ACTIVE_STREAM)

#: Every subject of :data:`RUN_INDEX_STREAM` / :data:`RUN_ACTIVE_STREAM`.
RUN_INDEX_FILTER = "runindex.*"
RUN_ACTIVE_FILTER = "runactive.*"
#: Key in ``workflow_runs`` that says every run stored before the index existed is in it.
RUN_INDEX_COMPLETE_KEY = "meta.run_index"


#: Prefix of the keys in ``workflow_defs`` that hold a definition by its content (a SHA-256 in
#: hex: ``engine.snapshot.definition_ref``) rather than by its name. A name is an id, which has
#: no dot, so no name is such a key.
DEFINITION_REF_PREFIX = "ref."


def definition_ref_key(ref: str) -> str:
    """Where ``workflow_defs`` keeps the definition whose content address is ``ref``."""
    return f"{DEFINITION_REF_PREFIX}{ref}"


def run_key(run_id: str) -> str:
    return f"run.{run_id}"


def checkpoint_key(run_id: str, step_id: str) -> str:
    return f"{run_id}.{step_id}"


def signal_key(run_id: str, name: str) -> str:
    return f"{run_id}.{name}"


def worker_poll_key(task_type: str) -> str:
    return f"poll.{task_type}"


__all__ = [
    "CHECKPOINTS_BUCKET",
    "DEFINITION_REF_PREFIX",
    "DEFS_BUCKET",
    "ENGINE_DURABLE",
    "HISTORY_DUPLICATE_WINDOW_S",
    "HISTORY_STREAM",
    "INPUTS_BUCKET",
    "INPUTS_DEDUPE_TTL_S",
    "JOURNAL_MAX_AGE_S",
    "JOURNAL_STREAM",
    "RUNS_BUCKET",
    "RUN_ACTIVE_FILTER",
    "RUN_ACTIVE_STREAM",
    "RUN_INDEX_COMPLETE_KEY",
    "RUN_INDEX_FILTER",
    "RUN_INDEX_STREAM",
    "SIGNALS_BUCKET",
    "TASK_STREAM",
    "TIMER_DURABLE",
    "TIMER_STREAM",
    "WORKER_POLLS_BUCKET",
    "WORKER_POLLS_MAX_AGE_S",
    "cancel_subject",
    "checkpoint_key",
    "definition_ref_key",
    "history_subject",
    "journal_subject",
    "preview_subject",
    "run_active_subject",
    "run_index_subject",
    "run_key",
    "run_tasks_filter",
    "run_timers_filter",
    "signal_key",
    "task_filter",
    "task_subject",
    "timer_subject",
    "worker_durable",
    "worker_poll_key",
]
