"""Golden replay of journals that went through crashes (issue 15 part 2): a holder killed inside
the unsafe tool (recovered within the attempt, the tool interrupted), and one killed after its
claim; the recorded journal replays clean against the same code, on SimTransport and on a real
nats-server."""

from __future__ import annotations

import pytest
import trio

from dagnats_trio._env import RuntimeEnv
from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.api import Service
from dagnats_trio.engine import Engine
from dagnats_trio.journal import read_journal
from dagnats_trio.testing import (
    AGENT_STEP_ID,
    Golden,
    GoldenHeader,
    ScriptedAgent,
    agent_workflow,
    replay_golden,
    wait_finished,
)
from dagnats_trio.transport import Transport
from dagnats_trio.worker import Worker

from ._helpers import uid

#: Short AckWaits so a killed holder's task comes back soon.
ACK_WAIT_S = 1.0
#: Bound of one recorded run (wall seconds on nats-server).
RUN_TIMEOUT_S = 60.0


@pytest.mark.parametrize("seam", [Seam.INSIDE_TOOL, Seam.AFTER_CLAIM])
async def test_a_recovered_journal_replays_clean(transport: Transport, seam: Seam) -> None:
    run_id = uid("g")
    killed: list[int] = []

    async def hook(ctx: SeamContext) -> None:
        if ctx.run_id == run_id and ctx.seam is seam and ctx.iteration == 1 and not killed:
            killed.append(ctx.iteration)
            raise RuntimeError("killed")

    agent = ScriptedAgent()
    service = Service(transport, RuntimeEnv(new_id=lambda: run_id))
    await service.register_workflow(agent_workflow("golden-recovered"))
    with trio.fail_after(RUN_TIMEOUT_S), install_hook(hook):
        async with trio.open_nursery() as nursery:
            engine = Engine(transport, legacy_step_events=False, ack_wait_s=ACK_WAIT_S)
            await nursery.start(engine.run)
            await nursery.start(Worker(transport, agent.handlers, ack_wait_s=ACK_WAIT_S).run)
            await service.start_run("golden-recovered", "deploy")
            snap = await wait_finished(service, run_id, trio.current_time() + RUN_TIMEOUT_S)
            nursery.cancel_scope.cancel()
    assert killed == [1] and snap.status.value == "completed"
    entries = await read_journal(transport, run_id, AGENT_STEP_ID)
    claims = sum(1 for _, r in entries if type(r).__name__ == "ClaimRecord")
    assert claims == 5  # four iterations, one recovered
    golden = Golden(GoldenHeader(1, run_id, AGENT_STEP_ID, "deploy"), tuple(entries))
    report = await replay_golden(golden, ScriptedAgent().turn)
    print(f"{seam.value}: {len(entries)} records, {report.deliveries} deliveries replayed")
    assert report.ok, [str(f) for f in report.findings]
    assert report.deliveries == 4
