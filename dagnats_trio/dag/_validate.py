"""Parse user JSON into a :class:`WorkflowDef`, collecting every problem before giving up.

Parsing is hand-written rather than left to cattrs because the point is the error report: each
problem names its step and field, and one bad field never hides the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..protocol import InvalidId, JsonPolicyError, check_id, decode_json
from ._durations import DurationError, parse_duration
from .graph import find_cycle
from .model import (
    DEFAULT_LOOP_STATE_MAX_BYTES,
    DEFAULT_RETRY_INITIAL_DELAY_MS,
    DEFAULT_RETRY_MAX_ATTEMPTS,
    DEFAULT_RETRY_MAX_DELAY_MS,
    DEFAULT_RETRY_MULTIPLIER,
    DEFAULT_WORKFLOW_VERSION,
    MAX_ATTEMPTS_LIMIT,
    MAX_ITERATIONS_LIMIT,
    MAX_LOOP_STATE_MAX_BYTES,
    MAX_STEPS_PER_WORKFLOW,
    AgentLoopConfig,
    Problem,
    RetryPolicy,
    RetryStrategy,
    StepDef,
    StepType,
    SubWorkflowConfig,
    WorkflowDef,
    WorkflowInvalid,
)

_WORKFLOW_KEYS = {"name", "version", "steps", "description"}
_STEP_KEYS = {
    "id",
    "task",
    "depends_on",
    "type",
    "timeout",
    "retry",
    "agent_loop",
    "sub_workflow",
    "description",
}
_RETRY_KEYS = {"max_attempts", "strategy", "initial_delay", "max_delay", "multiplier"}
_LOOP_KEYS = {"max_iterations", "max_duration", "loop_delay", "loop_state_max_bytes"}
_SUB_KEYS = {"workflow"}


class _Collector:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, step: str | None, field: str, message: str) -> None:
        self.problems.append(Problem(step, field, message))

    def unknown_keys(
        self, step: str | None, where: str, obj: Mapping[str, Any], allowed: set[str]
    ) -> None:
        for key in sorted(set(obj) - allowed):
            field = f"{where}.{key}" if where else key
            self.add(step, field, f"unknown field (expected one of {', '.join(sorted(allowed))})")

    def duration(
        self, step: str | None, field: str, raw: Any, *, positive: bool = False
    ) -> int | None:
        try:
            ms = parse_duration(raw)
        except DurationError as exc:
            self.add(step, field, str(exc))
            return None
        if positive and ms == 0:
            self.add(step, field, "must be greater than zero")
            return None
        return ms

    def integer(self, step: str | None, field: str, raw: Any, low: int, high: int) -> int | None:
        if isinstance(raw, bool) or not isinstance(raw, int):
            self.add(step, field, f"must be an integer, got {raw!r}")
            return None
        if not low <= raw <= high:
            self.add(step, field, f"must be between {low} and {high}, got {raw}")
            return None
        return raw

    def token(self, step: str | None, field: str, raw: Any) -> str | None:
        if raw is None:
            self.add(step, field, "required")
            return None
        if not isinstance(raw, str):
            self.add(step, field, f"must be a string, got {raw!r}")
            return None
        try:
            return check_id(field, raw)
        except InvalidId as exc:
            self.add(step, field, str(exc))
            return None


def parse_workflow(data: bytes | str | Mapping[str, Any]) -> WorkflowDef:
    """See :meth:`WorkflowDef.from_json`."""
    if isinstance(data, bytes | str):
        try:
            obj = decode_json(data, where="document")
        except JsonPolicyError as exc:
            raise WorkflowInvalid([Problem(None, "(document)", str(exc))]) from None
    else:
        obj = data
    if not isinstance(obj, Mapping):
        raise WorkflowInvalid([Problem(None, "(document)", "must be a JSON object")])
    c = _Collector()
    c.unknown_keys(None, "", obj, _WORKFLOW_KEYS)
    name = c.token(None, "name", obj.get("name"))
    version_raw = obj.get("version", DEFAULT_WORKFLOW_VERSION)
    version = c.integer(None, "version", version_raw, 1, 2**31 - 1)
    raw_steps = obj.get("steps")
    steps: list[StepDef] = []
    if not isinstance(raw_steps, list) or not raw_steps:
        c.add(None, "steps", "must be a non-empty list of steps")
    elif len(raw_steps) > MAX_STEPS_PER_WORKFLOW:
        c.add(None, "steps", f"at most {MAX_STEPS_PER_WORKFLOW} steps")
    else:
        # Dependencies are checked against every declared id, so one broken step does not
        # turn its dependents' references into "unknown step" noise.
        declared: dict[str, list[str]] = {}
        for index, raw in enumerate(raw_steps):
            step = _parse_step(c, index, raw)
            sid = raw.get("id") if isinstance(raw, Mapping) else None
            if not isinstance(sid, str):
                continue
            if sid in declared:
                c.add(sid, "id", "duplicate step id")
                continue
            deps_raw = raw.get("depends_on", [])
            declared[sid] = (
                [d for d in deps_raw if isinstance(d, str)] if isinstance(deps_raw, list) else []
            )
            if step is not None:
                steps.append(step)
        for sid, deps in declared.items():
            for dep in deps:
                if dep == sid:
                    c.add(sid, "depends_on", "a step cannot depend on itself")
                elif dep not in declared:
                    c.add(sid, "depends_on", f"unknown step {dep!r}")
        cycle = find_cycle(
            {sid: [d for d in deps if d in declared and d != sid] for sid, deps in declared.items()}
        )
        if cycle:
            c.add(cycle[0], "depends_on", f"dependency cycle: {' -> '.join(cycle)}")
    if c.problems or name is None or version is None:
        raise WorkflowInvalid(c.problems)
    return WorkflowDef(name=name, version=version, steps=tuple(steps))


def _parse_step(c: _Collector, index: int, raw: Any) -> StepDef | None:
    if not isinstance(raw, Mapping):
        c.add(f"#{index}", "(step)", "must be a JSON object")
        return None
    sid = c.token(f"#{index}", "id", raw.get("id"))
    label = sid if sid is not None else f"#{index}"
    c.unknown_keys(label, "", raw, _STEP_KEYS)
    ok = sid is not None

    type_raw = raw.get("type", StepType.NORMAL.value)
    try:
        stype = StepType(type_raw)
    except ValueError:
        c.add(label, "type", f"unknown type {type_raw!r} (normal, agent_loop or sub_workflow)")
        stype = None
        ok = False

    task = ""
    if raw.get("task") not in (None, "") or stype is not StepType.SUB_WORKFLOW:
        parsed_task = c.token(label, "task", raw.get("task"))
        ok = ok and parsed_task is not None
        task = parsed_task or ""

    deps_raw = raw.get("depends_on", [])
    deps: list[str] = []
    if not isinstance(deps_raw, list):
        c.add(label, "depends_on", "must be a list of step ids")
        ok = False
    else:
        for dep in deps_raw:
            if not isinstance(dep, str):
                c.add(label, "depends_on", f"{dep!r} is not a step id")
                ok = False
            elif dep in deps:
                c.add(label, "depends_on", f"{dep!r} listed twice")
                ok = False
            else:
                deps.append(dep)

    timeout: int | None = None
    if raw.get("timeout") is not None:
        timeout = c.duration(label, "timeout", raw["timeout"], positive=True)
        ok = ok and timeout is not None

    retry = _parse_retry(c, label, raw.get("retry"))
    ok = ok and retry is not None

    loop: AgentLoopConfig | None = None
    loop_raw = raw.get("agent_loop")
    if stype is StepType.AGENT_LOOP:
        loop = _parse_loop(c, label, loop_raw)
        ok = ok and loop is not None
    elif loop_raw is not None:
        c.add(label, "agent_loop", "only an agent_loop step takes an agent_loop block")
        ok = False

    sub: SubWorkflowConfig | None = None
    sub_raw = raw.get("sub_workflow")
    if stype is StepType.SUB_WORKFLOW:
        if not isinstance(sub_raw, Mapping):
            c.add(label, "sub_workflow", 'a sub_workflow step needs {"workflow": "child-name"}')
            ok = False
        else:
            c.unknown_keys(label, "sub_workflow", sub_raw, _SUB_KEYS)
            child = c.token(label, "sub_workflow.workflow", sub_raw.get("workflow"))
            ok = ok and child is not None
            sub = SubWorkflowConfig(child) if child else None
    elif sub_raw is not None:
        c.add(label, "sub_workflow", "only a sub_workflow step takes a sub_workflow block")
        ok = False

    if not ok or sid is None or stype is None or retry is None:
        return None
    return StepDef(
        id=sid,
        task=task,
        depends_on=tuple(deps),
        type=stype,
        timeout=timeout,
        retry=retry,
        agent_loop=loop,
        sub_workflow=sub,
    )


def _parse_retry(c: _Collector, label: str, raw: Any) -> RetryPolicy | None:
    if raw is None:
        return RetryPolicy()
    if not isinstance(raw, Mapping):
        c.add(label, "retry", "must be a JSON object")
        return None
    c.unknown_keys(label, "retry", raw, _RETRY_KEYS)
    before = len(c.problems)
    attempts = c.integer(
        label,
        "retry.max_attempts",
        raw.get("max_attempts", DEFAULT_RETRY_MAX_ATTEMPTS),
        1,
        MAX_ATTEMPTS_LIMIT,
    )
    strategy_raw = raw.get("strategy", RetryStrategy.FIXED.value)
    try:
        strategy = RetryStrategy(strategy_raw)
    except ValueError:
        c.add(
            label,
            "retry.strategy",
            f"unknown strategy {strategy_raw!r} (fixed, linear, exponential)",
        )
        strategy = RetryStrategy.FIXED
    initial = c.duration(
        label, "retry.initial_delay", raw.get("initial_delay", DEFAULT_RETRY_INITIAL_DELAY_MS)
    )
    max_delay = c.duration(
        label,
        "retry.max_delay",
        raw.get("max_delay", max(initial or 0, DEFAULT_RETRY_MAX_DELAY_MS)),
    )
    multiplier_raw = raw.get("multiplier", DEFAULT_RETRY_MULTIPLIER)
    multiplier = DEFAULT_RETRY_MULTIPLIER
    if isinstance(multiplier_raw, bool) or not isinstance(multiplier_raw, int | float):
        c.add(label, "retry.multiplier", f"must be a number, got {multiplier_raw!r}")
    elif not 1.0 <= float(multiplier_raw) <= 100.0:
        c.add(label, "retry.multiplier", f"must be between 1 and 100, got {multiplier_raw}")
    else:
        multiplier = float(multiplier_raw)
    if initial is not None and max_delay is not None and max_delay < initial:
        c.add(label, "retry.max_delay", "must not be shorter than initial_delay")
    if len(c.problems) > before or attempts is None or initial is None or max_delay is None:
        return None
    return RetryPolicy(attempts, strategy, initial, max_delay, multiplier)


def _parse_loop(c: _Collector, label: str, raw: Any) -> AgentLoopConfig | None:
    if not isinstance(raw, Mapping):
        c.add(label, "agent_loop", 'an agent_loop step needs {"max_iterations": N, ...}')
        return None
    c.unknown_keys(label, "agent_loop", raw, _LOOP_KEYS)
    before = len(c.problems)
    if "max_iterations" not in raw:
        c.add(label, "agent_loop.max_iterations", "required for an agent_loop step")
        iterations = None
    else:
        iterations = c.integer(
            label, "agent_loop.max_iterations", raw["max_iterations"], 1, MAX_ITERATIONS_LIMIT
        )
    max_duration: int | None = None
    if raw.get("max_duration") is not None:
        max_duration = c.duration(
            label, "agent_loop.max_duration", raw["max_duration"], positive=True
        )
    loop_delay = c.duration(label, "agent_loop.loop_delay", raw.get("loop_delay", 0))
    cap = c.integer(
        label,
        "agent_loop.loop_state_max_bytes",
        raw.get("loop_state_max_bytes", DEFAULT_LOOP_STATE_MAX_BYTES),
        1,
        MAX_LOOP_STATE_MAX_BYTES,
    )
    if len(c.problems) > before or iterations is None or loop_delay is None or cap is None:
        return None
    return AgentLoopConfig(iterations, max_duration, loop_delay, cap)


def validate(data: bytes | str | Mapping[str, Any]) -> list[Problem]:
    """Every problem of a definition, or [] when it is valid."""
    try:
        parse_workflow(data)
    except WorkflowInvalid as exc:
        return exc.problems
    return []
