"""The JSON a verb prints that is not one of the API's own views (``--json``)."""

from __future__ import annotations

from typing import final

import attrs

from ..journal import UNDECODABLE_RULE
from ._journal import RunCheck


@final
@attrs.frozen
class Purged:
    """``run purge --json``."""

    run_id: str
    purged: bool = True


@final
@attrs.frozen
class StepCheckJson:
    step_id: str
    ok: bool
    summary: str
    violations: tuple[str, ...]
    #: The ``undecodable`` violations again (kept for scripts that read this field).
    undecodable: tuple[str, ...]
    iterations_compared: bool


@final
@attrs.frozen
class RunCheckJson:
    """``journal check --json``."""

    run_id: str
    ok: bool
    steps: tuple[StepCheckJson, ...]


def run_check_json(run_id: str, result: RunCheck) -> RunCheckJson:
    return RunCheckJson(
        run_id,
        result.ok,
        tuple(
            StepCheckJson(
                s.step_id,
                s.ok,
                s.report.summary(),
                tuple(str(v) for v in s.report.violations),
                tuple(str(v) for v in s.report.violations if v.rule == UNDECODABLE_RULE),
                s.compared_iterations,
            )
            for s in result.steps
        ),
    )


__all__ = ["Purged", "RunCheckJson", "StepCheckJson", "run_check_json"]
