"""What the NATS outage tests share: how long the server stays away, their bounds, the wait for
an API's ``/healthz`` to answer a given status (in process or as a separate process), and
:func:`ride_out_at_once`, which runs their scenarios side by side.

Each scenario stops its own nats-server for :data:`OUTAGE_S` and waits the outage out in full
(the outage is what is tested). Run one after the other they cost the suite three outages of
idle waiting; tests/conftest.py instead runs them at once, in a process of their own
(tests/_outage_run.py) started when the session's tests are collected, so the wait overlaps the
rest of the suite. Each still has its own server, its own clients and its own log records, and
the tests assert on each one's outcome as before (the ``outages`` fixture).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Final

import attrs
import httpx
import trio

#: How long the server stays down: three times what used to kill the workers for good.
OUTAGE_S: Final = 90.0
#: Bound on the run reaching the unsafe tool, on /healthz seeing the server go, on one request.
START_BOUND_S: Final = 30.0
#: Bound on the run finishing once the server is back (reconnect pauses are capped at 5 s).
RECOVERY_BOUND_S: Final = 60.0
#: Pause between two looks at the run or at /healthz.
LOOK_EVERY_S: Final = 0.2
#: The logger whose records a scenario keeps (its level is lowered to INFO meanwhile).
PROJECT_LOGGER: Final = "dagnats_trio"

#: The scenario the running task belongs to: Trio tasks inherit it from the task that started
#: them, so every record logged inside a scenario is told apart from the others' records.
_SCENARIO: ContextVar[str | None] = ContextVar("outage_scenario", default=None)


async def health_answer(http: httpx.AsyncClient, status: int, bound_s: float) -> dict[str, str]:
    """The body of the first ``/healthz`` answer with ``status``, within ``bound_s``."""
    with trio.fail_after(bound_s):
        while True:
            r = await http.get("/healthz")
            if r.status_code == status:
                body: dict[str, str] = r.json()
                return body
            await trio.sleep(LOOK_EVERY_S)


class ScenarioFailed(Exception):
    """A scenario's error, carried from the process that ran it (tests/_outage_run.py) as the
    text of its traceback."""


@attrs.frozen
class Said:
    """One log record of a scenario: the logger's name and the message."""

    logger: str
    message: str


@attrs.frozen
class Ridden:
    """What one scenario returned or raised, and what was logged inside it."""

    value: object
    error: Exception | None
    said: list[Said]

    def unwrap(self) -> object:
        """The scenario's value; what it raised is raised again here, in its test."""
        if self.error is not None:
            raise self.error
        return self.value

    def messages(self, logger: str) -> list[str]:
        return [s.message for s in self.said if s.logger == logger]


class _ScenarioHandler(logging.Handler):
    """Keeps each record under the scenario that logged it."""

    def __init__(self, said: dict[str, list[Said]]) -> None:
        super().__init__(logging.INFO)
        self.said = said

    def emit(self, record: logging.LogRecord) -> None:
        name = _SCENARIO.get()
        if name is not None:
            self.said[name].append(Said(record.name, record.getMessage()))


def ride_out_at_once(scenarios: Mapping[str, Callable[[], Awaitable[object]]]) -> dict[str, Ridden]:
    """Run ``scenarios`` side by side in one ``trio.run``, so their outages overlap. A scenario
    that fails keeps its error for its own test and does not cancel the others."""
    said: dict[str, list[Said]] = {name: [] for name in scenarios}
    results: dict[str, Ridden] = {}

    async def one(name: str, scenario: Callable[[], Awaitable[object]]) -> None:
        _SCENARIO.set(name)
        try:
            results[name] = Ridden(await scenario(), None, said[name])
        except Exception as error:
            results[name] = Ridden(None, error, said[name])

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for name, scenario in scenarios.items():
                nursery.start_soon(one, name, scenario)

    logger = logging.getLogger(PROJECT_LOGGER)
    handler = _ScenarioHandler(said)
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        trio.run(main)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return results
