"""The in-suite soak's summary (its seed, its figures and the command that replays it), printed
at the end of the session, where ``pytest -q`` still shows it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

SOAK_SUMMARY_PROPERTY = "chaos soak"


@pytest.fixture
def record_soak_summary(record_property: pytest.RecordProperty) -> Callable[[str], None]:
    """Record a line for the end-of-session summary."""

    def record(line: str) -> None:
        record_property(SOAK_SUMMARY_PROPERTY, line)

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for name, value in getattr(report, "user_properties", ()):
                if name == SOAK_SUMMARY_PROPERTY:
                    terminalreporter.write_line(f"{SOAK_SUMMARY_PROPERTY}: {value}")
