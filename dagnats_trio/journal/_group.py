"""A parallel tool group once the replay rules have decided each member: its intents stored
together, the results the journal answers, then the members that must run, at once.

The intents go out together, fenced on the tail, before any member starts, as one message (or,
too big for one, one atomic batch): the server stores it whole or not at all, so a crash leaves
either every intent of the group (and no member started) or none of them (and nothing of the
group happened). A group is capped at nats-server's atomic batch limit, so the batch path
stays open to any group. The decisions stay in the handle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import trio

from dagnats_trio._seams import Seam, current_hook
from dagnats_trio.transport import MAX_BATCH_PUBLISH_MSGS

from ._calls import GroupCall
from ._fencing import FencedWriter
from ._holder import DeliveryState
from ._pairs import intent_record
from ._replay import TaskIdentity, ToolAction, ToolDecision, ToolResult, call_key
from ._tool_run import ToolRunner

#: Most calls in one parallel group (``Journal.tools``): its intents are stored together, as an
#: atomic batch when too big for one message, and nats-server stores at most this many
#: messages in one batch.
MAX_GROUP_CALLS: Final = MAX_BATCH_PUBLISH_MSGS


def check_group_size(n: int) -> None:
    """ValueError, before anything is written, for a group past :data:`MAX_GROUP_CALLS`."""
    if n > MAX_GROUP_CALLS:
        raise ValueError(
            f"a parallel group holds at most {MAX_GROUP_CALLS} calls (its intents are stored "
            f"together, as an atomic batch when too big for one message, and the server stores "
            f"at most {MAX_BATCH_PUBLISH_MSGS} messages in one), got {n}: split it into "
            f"several groups"
        )


async def run_decided_group(
    *,
    task: TaskIdentity,
    writer: FencedWriter,
    holder: DeliveryState,
    tools: ToolRunner,
    first: int,
    members: Sequence[GroupCall],
    decisions: Sequence[ToolDecision],
    cancel_on_error: bool,
) -> list[ToolResult]:
    """Write, answer and run the group whose members ``decisions`` decided (no mismatch among
    them); the results in the members' order."""
    n = len(members)
    # 1. Every intent the group needs, before any function starts: stored together.
    intents = [
        intent_record(task, writer.claim_id, first + k, *members[k][:2], group=first,
                      group_size=n)
        for k, d in enumerate(decisions)
        if d.action is ToolAction.RUN or (d.action is ToolAction.RECORD and d.write_intent)
    ]  # fmt: skip
    if intents:
        await writer.append_batch(intents)
        if current_hook() is not None:
            await holder.seam(Seam.AFTER_TOOL_INTENT)
    # 2. What the journal answers: finished calls, honoured starts, interruptions.
    results: list[ToolResult | None] = [None] * n
    for k, d in enumerate(decisions):
        if d.action is ToolAction.REUSE:
            results[k] = d.result
        elif d.action is ToolAction.RECORD:
            assert d.result is not None
            await tools.record_result(first + k, d.result)
            results[k] = d.result
    # 3. The rest run at once.
    to_run = [k for k in range(n) if results[k] is None]
    if not to_run:
        await trio.lowlevel.checkpoint()
    else:
        t = task
        keys = [call_key(t.run_id, t.step_id, t.iteration, first + k) for k in range(n)]
        await tools.run_group(first, list(members), keys, to_run, results, cancel_on_error)
    done = [r for r in results if r is not None]
    assert len(done) == n
    return done
