"""The journal audit over HTTP: ``GET /runs/{run}/steps/{step}/journal/check``.

The same audit as ``dagnats journal check`` (:func:`dagnats_trio.journal.check`, pure), run by
the API on the step's whole journal, so a browser (the console's "journal check" button) gets
the verdict without reimplementing the rules.
"""

from __future__ import annotations

from typing import final

import attrs

from ..journal import check, read_journal_for_audit
from ..transport import Transport
from .service import Service


@final
@attrs.frozen
class ViolationView:
    """One broken rule; ``seq`` is the record it was found at (None for the whole journal)."""

    rule: str
    seq: int | None
    message: str


@final
@attrs.frozen
class JournalCheck:
    """The verdict. ``compared_iterations`` is False until the step has finished (the engine may not
    have applied a stored commit yet, so its iteration count is not compared). A record that
    does not decode is a violation of rule ``undecodable`` at its ``seq``; ``ok``, ``summary``
    and ``violations`` always agree."""

    ok: bool
    summary: str
    records: int
    commits: int
    iterations: int
    compared_iterations: bool
    violations: tuple[ViolationView, ...]


async def check_step(
    service: Service, transport: Transport, run_id: str, step_id: str
) -> JournalCheck:
    """Read the step's journal and audit it (the caller checked that the step exists)."""
    snap = await service.get_run(run_id)
    step = snap.steps[step_id]
    settled = step.status.finished
    records, unreadable, batches = await read_journal_for_audit(transport, run_id, step_id)
    report = check(
        records,
        engine_iterations=step.iterations if settled else None,
        unreadable=unreadable,
        batches=batches,
    )
    return JournalCheck(
        ok=report.ok,
        summary=report.summary(),
        records=report.records,
        commits=report.commits,
        iterations=report.iterations,
        compared_iterations=settled,
        violations=tuple(ViolationView(v.rule, v.seq, v.message) for v in report.violations),
    )
