"""The route table of the worker bridge (docs/bridge.md): its lease routes share a token
parameter and the answers of a lease that is unknown, fenced, busy or gone."""

from __future__ import annotations

from typing import Any

from ..bridge import (
    Appended,
    CheckpointBody,
    CheckpointSaved,
    CheckpointState,
    ClaimedJournal,
    CompleteBody,
    ContinueBody,
    FailBody,
    HeartbeatView,
    JournalAppendBody,
    LeaseView,
    PauseBody,
    PlacedInputs,
    PlaceInputsBody,
    Settled,
)
from ..web import ErrorEnvelope
from ._rest_routedoc import BAD_REQUEST, TOO_LARGE, Answer, Param, RouteDoc, path_param

_TOKEN = path_param("token", "The lease token from `poll`.")
_NO_LEASE = Answer(
    404,
    "Unknown lease (`lease_not_found`), or this server runs no bridge (`bridge_disabled`).",
    ErrorEnvelope,
)
_FENCED_OR_BUSY = Answer(
    409,
    "`fenced`: a successor claimed the task's journal; `cancelled`: the run was cancelled; "
    "`lease_busy`: another request of this lease is running.",
    ErrorEnvelope,
)
_GONE = Answer(
    410,
    "The task is finished for this lease: `stale`, `committed`, `restart_limit`, `settled` or "
    "`lease_expired`.",
    ErrorEnvelope,
)
_LEASE_ANSWERS = (BAD_REQUEST, _NO_LEASE, _FENCED_OR_BUSY, _GONE, TOO_LARGE)
_CLAIMS = (
    "The first `journal/read`, `journal/append` or `inputs/place` of a lease claims the task's "
    "journal, as the Python SDK's `tc.journal()` does."
)
_SETTLES = (
    "Once the lease has claimed the journal this commits first and then publishes the lifecycle "
    "event; without a claim it publishes the event with the dispatch identity. Then the task is "
    "acknowledged. A cancelled run answers 409 `cancelled`."
)


def _lease_route(
    suffix: str,
    operation_id: str,
    summary: str,
    ok: Answer,
    *,
    description: str = "",
    body: Any = None,
    body_required: bool = True,
    extra: tuple[Answer, ...] = (),
) -> RouteDoc:
    return RouteDoc(
        "POST",
        f"/bridge/leases/{{token}}/{suffix}",
        operation_id,
        summary,
        description=description,
        params=(_TOKEN,),
        body=body,
        body_required=body_required,
        answers=(ok, *_LEASE_ANSWERS, *extra),
    )


BRIDGE_ROUTES: tuple[RouteDoc, ...] = (
    RouteDoc(
        "POST",
        "/bridge/tasks/{task_type}/poll",
        "bridge_poll",
        "Lease the next task of a task type (long poll).",
        description=(
            "The lease holds one delivery of the durable consumer `workers-{task_type}`, shared "
            "with Python workers of that type. Send any lease request at least every "
            "`ack_wait_ms` (heartbeat while working); a lease left quiet longer expires and the "
            "task is redelivered. See docs/bridge.md."
        ),
        params=(
            path_param("task_type", "The task type."),
            Param(
                "wait",
                "query",
                'Wait up to this long for a task: "10s", "500ms" or integer milliseconds '
                "(default 0; bounded by the bridge's maximum).",
            ),
        ),
        answers=(
            Answer(200, "A leased task.", LeaseView),
            Answer(204, "No task came within `wait`."),
            BAD_REQUEST,
            Answer(404, "This server runs no bridge (`bridge_disabled`).", ErrorEnvelope),
            Answer(
                503,
                "`too_many_leases`: the bridge holds its maximum of leases; `not_provisioned`.",
                ErrorEnvelope,
            ),
        ),
    ),
    _lease_route(
        "heartbeat",
        "bridge_heartbeat",
        "Keep the lease alive and check the run and the claim.",
        Answer(200, "The lease is alive.", HeartbeatView),
    ),
    _lease_route(
        "journal/read",
        "bridge_journal_read",
        "The claim and the records of the current iteration.",
        Answer(200, "The claim and the records.", ClaimedJournal),
        description=_CLAIMS
        + " A stale task answers 410 `stale`; one this dispatch already committed republishes "
        "its event and answers 410 `committed`; a claim over the restart limit commits the "
        "failure and answers 410 `restart_limit`.",
        extra=(Answer(503, "`not_provisioned`: the journal stream is missing.", ErrorEnvelope),),
    ),
    _lease_route(
        "journal/append",
        "bridge_journal_append",
        "Append a model or tool record (fenced on the lease's last sequence).",
        Answer(200, "Stored.", Appended),
        description=_CLAIMS
        + " The record kinds are in docs/journal-wire-format.md. A record at the wrong "
        "position (a `tool.result` or `tool.output` with no intent at its call, a second "
        "intent, result or model record at one position, a model record at a tool's) answers "
        "400 `invalid_record` naming the rule of `journal check` it would break, and nothing "
        "is written (a misplaced first record does not claim).",
        body=JournalAppendBody,
    ),
    _lease_route(
        "inputs/place",
        "bridge_place_inputs",
        "Place the queued inputs of a mode (`tc.place_inputs`).",
        Answer(200, "The inputs placed in this iteration, each once per lease.", PlacedInputs),
        description=_CLAIMS,
        body=PlaceInputsBody,
    ),
    _lease_route(
        "load_checkpoint",
        "bridge_load_checkpoint",
        "The task's state and where it came from.",
        Answer(200, "The state.", CheckpointState),
    ),
    _lease_route(
        "checkpoint",
        "bridge_checkpoint",
        "Save the state for the next iteration.",
        Answer(200, "Saved.", CheckpointSaved),
        description=(
            "With a claim the state rides the next commit (no cap); otherwise it is written to "
            "KV, capped by the step's `loop_state_max_bytes` (413 `checkpoint_too_large`)."
        ),
        body=CheckpointBody,
    ),
    _lease_route(
        "complete",
        "bridge_complete",
        "The step is done with an output.",
        Answer(200, "Settled.", Settled),
        description=_SETTLES,
        body=CompleteBody,
        body_required=False,
    ),
    _lease_route(
        "fail",
        "bridge_fail",
        "This attempt failed.",
        Answer(200, "Settled.", Settled),
        description=_SETTLES,
        body=FailBody,
    ),
    _lease_route(
        "continue",
        "bridge_continue",
        "End this iteration of an agent loop, optionally with a durable wait.",
        Answer(200, "Settled.", Settled),
        description=_SETTLES
        + " With `until_input` while inputs are queued it answers 409 `inputs_queued` and "
        "settles nothing.",
        body=ContinueBody,
        body_required=False,
    ),
    _lease_route(
        "pause",
        "bridge_pause",
        "Park the step; it comes back to the same iteration and attempt.",
        Answer(200, "Settled.", Settled),
        description=_SETTLES,
        body=PauseBody,
    ),
)
