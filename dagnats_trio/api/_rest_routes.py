"""The route table of the REST API proper (the worker bridge's routes are
:mod:`._rest_routes_bridge`): what each route takes and answers, for the app and the document."""

from __future__ import annotations

from ..dag import WorkflowDef
from ..inputs import Submission
from ..web import ErrorEnvelope, InvalidWorkflowEnvelope
from ._rest_check import JournalCheck
from ._rest_journal import JOURNAL_PAGE_LIMIT_DEFAULT, JOURNAL_PAGE_LIMIT_MAX
from ._rest_routedoc import (
    BAD_REQUEST,
    NO_RUN,
    NO_STEP,
    NON_NEGATIVE_INT,
    REQUEST_ID,
    RUN_ID,
    SSE,
    STEP_ID,
    TOO_LARGE,
    Answer,
    Param,
    RouteDoc,
    path_param,
)
from ._rest_views import (
    HEALTH_NATS_TIMEOUT_S,
    CancelBody,
    Health,
    JournalEntry,
    JournalPage,
    PreviewChunk,
    RunList,
    RunStarted,
    RunView,
    SignalAccepted,
    SignalBody,
    StartRunBody,
    SubmitInputBody,
    WorkflowList,
)
from .service import LIST_RUNS_LIMIT_DEFAULT, LIST_RUNS_LIMIT_MAX

API_ROUTES: tuple[RouteDoc, ...] = (
    RouteDoc(
        "GET",
        "/healthz",
        "health",
        "Health of the API process and of its NATS connection.",
        description=(
            "Answers 200 with `nats` = `up` when NATS JetStream answers a round trip within "
            f"{HEALTH_NATS_TIMEOUT_S:g} s, and 503 with `status` = `unavailable` and `nats` = "
            "`down` when it does not (the process serves, but every NATS-backed route would "
            "answer 503)."
        ),
        answers=(
            Answer(200, "The process serves requests and NATS answers.", Health),
            Answer(503, "NATS does not answer.", Health),
        ),
        auth=False,
    ),
    RouteDoc(
        "GET",
        "/openapi.json",
        "openapi",
        "This document.",
        answers=(Answer(200, "The OpenAPI document.", None),),
    ),
    RouteDoc(
        "POST",
        "/workflows",
        "register_workflow",
        "Register (or replace) a workflow definition.",
        body=WorkflowDef,
        body_description=(
            'A workflow definition. Durations may be strings such as "30s" or integer '
            "milliseconds; they come back as milliseconds."
        ),
        answers=(
            Answer(201, "Registered; the stored definition.", WorkflowDef),
            Answer(
                400,
                "Bad JSON, or an invalid definition: `error.problems` lists every problem with "
                "its step and field.",
                InvalidWorkflowEnvelope,
            ),
            TOO_LARGE,
        ),
    ),
    RouteDoc(
        "GET",
        "/workflows",
        "list_workflows",
        "Every registered workflow.",
        answers=(Answer(200, "The definitions.", WorkflowList),),
    ),
    RouteDoc(
        "GET",
        "/workflows/{name}",
        "get_workflow",
        "One workflow definition.",
        params=(path_param("name", "The workflow name."),),
        answers=(
            Answer(200, "The definition.", WorkflowDef),
            Answer(404, "Unknown workflow.", ErrorEnvelope),
        ),
    ),
    RouteDoc(
        "POST",
        "/runs",
        "start_run",
        "Start a run of a registered workflow.",
        description="A repeat with the same `idempotency_key` returns the run the key started.",
        body=StartRunBody,
        answers=(
            Answer(201, "Started; the run id.", RunStarted),
            BAD_REQUEST,
            Answer(404, "Unknown workflow.", ErrorEnvelope),
            Answer(
                413,
                "The body is larger than the configured limit, or `input_too_large`: the input "
                "is over half the server's `max_payload` less 64 KiB, encoded (480 KiB on a "
                "default server, `RUN_INPUT_MAX_BYTES`), or the run's first snapshot (the input "
                "once, and again in each first step's task) would be over one NATS message.",
                ErrorEnvelope,
            ),
        ),
    ),
    RouteDoc(
        "GET",
        "/runs",
        "list_runs",
        "Runs newest first (by start), filtered and paged by a cursor.",
        params=(
            Param("workflow", "query", "Only runs of this workflow."),
            Param(
                "status",
                "query",
                "Only runs in this status.",
                {"type": "string", "enum": ["running", "completed", "failed", "cancelled"]},
            ),
            Param(
                "limit",
                "query",
                f"Runs per page (1-{LIST_RUNS_LIMIT_MAX}, default {LIST_RUNS_LIMIT_DEFAULT}).",
                {"type": "integer", "minimum": 1, "maximum": LIST_RUNS_LIMIT_MAX},
            ),
            Param("cursor", "query", "`next_cursor` of the previous page."),
        ),
        answers=(Answer(200, "One page of runs.", RunList), BAD_REQUEST),
    ),
    RouteDoc(
        "GET",
        "/runs/{run_id}",
        "get_run",
        "A run with its steps (iteration, attempt, status, output, error of each).",
        params=(RUN_ID,),
        answers=(Answer(200, "The run.", RunView), NO_RUN),
    ),
    RouteDoc(
        "POST",
        "/runs/{run_id}/cancel",
        "cancel_run",
        "Ask the engine to cancel a run (asynchronous).",
        description="The `reason` becomes the run's error: at most 4096 characters "
        "(`CANCEL_REASON_MAX_CHARS`), a longer one is 400.",
        params=(RUN_ID,),
        body=CancelBody,
        body_required=False,
        answers=(
            Answer(202, "Cancellation requested; the run as it was.", RunView),
            BAD_REQUEST,
            NO_RUN,
            Answer(409, "The run has already finished.", ErrorEnvelope),
            TOO_LARGE,
        ),
    ),
    RouteDoc(
        "DELETE",
        "/runs/{run_id}",
        "purge_run",
        "Purge a finished run: remove every trace of it, its child runs included.",
        description=(
            "Removes the run's history, leftover task messages and timers, the journal of every "
            "step, checkpoints, signals, inputs, the idempotency key (which can then start a new "
            "run) and the snapshot, and does the same for the child runs of its sub-workflow "
            "steps. Only a completed, failed or cancelled run can be purged. An interrupted "
            "purge can be repeated; once a purge has answered 204 the run is 404."
        ),
        params=(RUN_ID,),
        answers=(
            Answer(204, "Purged."),
            Answer(
                400, "The run has more nested child runs than one purge removes.", ErrorEnvelope
            ),
            Answer(404, "Unknown run (or already purged).", ErrorEnvelope),
            Answer(
                409,
                "`run_running`: the run, or one of its child runs, has not finished.",
                ErrorEnvelope,
            ),
        ),
    ),
    RouteDoc(
        "POST",
        "/runs/{run_id}/signal/{name}",
        "send_signal",
        "Send a named signal with a JSON payload to a run.",
        params=(RUN_ID, path_param("name", "The signal name.")),
        body=SignalBody,
        body_required=False,
        answers=(Answer(202, "Signal stored.", SignalAccepted), BAD_REQUEST, NO_RUN, TOO_LARGE),
    ),
    RouteDoc(
        "POST",
        "/runs/{run_id}/steps/{step_id}/inputs",
        "submit_input",
        "Submit an input (steer or follow_up) to a running step.",
        description=(
            "A repeat of the same `request_id` returns the original submission, whatever its "
            "content, so a client may retry safely: while the submission is queued or placed "
            "(however long the step waits) and for seven days after it finished."
        ),
        params=(RUN_ID, STEP_ID),
        body=SubmitInputBody,
        answers=(
            Answer(201, "A new submission, queued.", Submission),
            Answer(200, "A repeat: the original submission.", Submission),
            BAD_REQUEST,
            NO_STEP,
            Answer(409, "The step or run has finished.", ErrorEnvelope),
            Answer(413, "The body or the content is too large.", ErrorEnvelope),
        ),
    ),
    RouteDoc(
        "GET",
        "/runs/{run_id}/steps/{step_id}/inputs/{request_id}",
        "get_input",
        "An input's status; with `wait`, after it changes (long poll).",
        description=(
            "`queued` and `placed` are passing states; every submission ends `done` (the "
            "iteration that placed it committed), `unanswered` (the step finished first: before "
            "it was placed, or after an iteration that placed it failed, was cancelled or timed "
            "out; `placed_iteration` then says which) or `withdrawn`, so a client long-polling "
            "with `wait` always sees a final state."
        ),
        params=(
            RUN_ID,
            STEP_ID,
            REQUEST_ID,
            Param(
                "wait",
                "query",
                'Wait up to this long for a change: "30s", "500ms" or integer milliseconds '
                "(bounded by the server's maximum).",
            ),
            Param(
                "since",
                "query",
                "With `wait`: wait for a status other than this one (default: the current).",
                {
                    "type": "string",
                    "enum": ["queued", "placed", "done", "withdrawn", "unanswered"],
                },
            ),
        ),
        answers=(
            Answer(200, "The submission.", Submission),
            BAD_REQUEST,
            Answer(404, "Unknown input.", ErrorEnvelope),
        ),
    ),
    RouteDoc(
        "DELETE",
        "/runs/{run_id}/steps/{step_id}/inputs/{request_id}",
        "withdraw_input",
        "Withdraw a queued input; once answered 204, it is never placed.",
        params=(RUN_ID, STEP_ID, REQUEST_ID),
        answers=(
            Answer(204, "Withdrawn (also for a repeated withdrawal)."),
            BAD_REQUEST,
            Answer(404, "Unknown input.", ErrorEnvelope),
            Answer(409, "Already placed (or settled otherwise).", ErrorEnvelope),
        ),
    ),
    RouteDoc(
        "GET",
        "/runs/{run_id}/steps/{step_id}/journal",
        "read_journal",
        "A step's journal records: a page, or a server-sent event stream with `follow=1`.",
        description=(
            "A page holds the records of up to `limit` stored messages with sequence >= "
            "`from`; pass `next` back as `from` for the next page. A message may hold several "
            "records (a record group, stored whole): they share its sequence, so a page may "
            "hold more than `limit` records. With `follow=1` the answer is "
            "`text/event-stream`: each event has `id` = the record's place, `event` = the "
            "record type, `data` = the record entry as JSON. The place is the record's "
            "sequence, except for a record before the last of a message holding several: "
            "`{seq}.{k}` (its k-th record). The stream delivers new records as they are written "
            "and ends with an `end` event once the step (or its run) has finished and every "
            "record was sent. A client that reconnects with `Last-Event-ID` resumes right after "
            "that record, with no gap and no repeat. The record kinds and their fields are in "
            "docs/journal-wire-format.md."
        ),
        params=(
            RUN_ID,
            STEP_ID,
            Param("from", "query", "First sequence to return (default 1).", NON_NEGATIVE_INT),
            Param(
                "limit",
                "query",
                f"Records per page (1-{JOURNAL_PAGE_LIMIT_MAX}, default "
                f"{JOURNAL_PAGE_LIMIT_DEFAULT}); ignored with `follow`.",
                {"type": "integer", "minimum": 1, "maximum": JOURNAL_PAGE_LIMIT_MAX},
            ),
            Param(
                "follow",
                "query",
                "`1` or `true` for a server-sent event stream.",
                {"type": "string", "enum": ["0", "1", "true", "false"]},
            ),
            Param(
                "Last-Event-ID",
                "header",
                "With `follow`: resume after this record, `{seq}` or `{seq}.{k}` (an event's "
                "`id`; wins over `from`).",
                {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"},
            ),
        ),
        answers=(
            Answer(200, "A page of records (JSON), or the event stream.", JournalPage),
            Answer(
                200,
                "With `follow=1`: events whose data is a journal entry.",
                JournalEntry,
                media=SSE,
            ),
            BAD_REQUEST,
            NO_STEP,
        ),
    ),
    RouteDoc(
        "GET",
        "/runs/{run_id}/steps/{step_id}/preview",
        "follow_preview",
        "A step's live preview (what its handler sends with `put_stream`), as a server-sent "
        "event stream.",
        description=(
            "The answer is `text/event-stream`. Each chunk the handler puts after the client has "
            "the response headers is one `preview` event, in the order it was put, whose `data` "
            "is a preview chunk as JSON: `text` when the chunk is UTF-8, else `base64` of its "
            "bytes. The stream ends with an `end` event once the step (or its run) has "
            "finished. A preview is live, not a record: nothing is stored, events carry no "
            "`id`, and a reconnect gets what is put from then on (the journal holds the "
            "record). Comment lines keep a quiet stream alive."
        ),
        params=(RUN_ID, STEP_ID),
        answers=(
            Answer(200, "Events whose data is a preview chunk.", PreviewChunk, media=SSE),
            BAD_REQUEST,
            NO_STEP,
        ),
    ),
    RouteDoc(
        "GET",
        "/runs/{run_id}/steps/{step_id}/journal/check",
        "check_journal",
        "The audit of a step's journal (the rules of `dagnats journal check`).",
        description=(
            "Reads the step's whole journal and runs the audit of "
            "`dagnats_trio.journal.check` on it: `ok` with the counts, or the violations, each "
            "with its `rule`, the record's `seq` and a message. Until the step has finished, the "
            "engine's iteration count is not compared (`compared_iterations` false). A record "
            "that does not decode is a violation of rule `undecodable`."
        ),
        params=(RUN_ID, STEP_ID),
        answers=(
            Answer(200, "The verdict.", JournalCheck),
            BAD_REQUEST,
            NO_STEP,
        ),
    ),
)
