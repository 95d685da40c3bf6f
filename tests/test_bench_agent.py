"""``just bench agent`` (issue 12): the headline's derivation and its constants tell one story.

The bench measures round trips and durable writes per run and prints them beside these
constants; a derivation whose prose and numbers drift apart would make the comparison lie.
"""

from __future__ import annotations

import re

from bench.agent import (
    DURABLE_WRITES_PER_TOOL_ITERATION,
    HEADLINE,
    MIN_ROUND_TRIPS_DERIVATION,
    MIN_ROUND_TRIPS_PER_RUN,
    MIN_ROUND_TRIPS_PER_TOOL_ITERATION,
    OFF_PATH_PER_RUN,
    PAIRED,
    PAIRED_DURABLE_WRITES_PER_TOOL_ITERATION,
    PAIRED_MIN_ROUND_TRIPS_PER_RUN,
    PULLS_PER_RUN,
)


def _number_before(phrase: str) -> int:
    found = re.findall(rf"(\d+) {phrase}", MIN_ROUND_TRIPS_DERIVATION)
    assert len(found) == 1, f"{phrase!r}: {found}"
    return int(found[0])


def test_the_headline_writes_each_record_alone_and_the_paired_script_is_beside_it() -> None:
    # On single-replica file streams an atomic batch costs the server a staged file store, so
    # the faster configuration is the headline (docs/jetstream.md, "Cost").
    assert not HEADLINE.paired
    assert PAIRED.paired
    names = {HEADLINE.task, HEADLINE.long_task, PAIRED.task, PAIRED.long_task}
    assert len(names) == 4


def test_the_derivation_states_the_constants() -> None:
    assert _number_before("counted") == MIN_ROUND_TRIPS_PER_RUN == 50
    waited = MIN_ROUND_TRIPS_PER_RUN - PULLS_PER_RUN - OFF_PATH_PER_RUN
    assert _number_before(r"on the critical path\.") == waited == 39
    assert _number_before("durable writes per tool iteration;") == (
        DURABLE_WRITES_PER_TOOL_ITERATION
    )
    assert _number_before(r"round trips counted \(") == MIN_ROUND_TRIPS_PER_TOOL_ITERATION
    assert _number_before("durable writes and 9") == PAIRED_DURABLE_WRITES_PER_TOOL_ITERATION
    assert _number_before("round trips per run, 33") == PAIRED_MIN_ROUND_TRIPS_PER_RUN == 44
    # Each tool iteration pairs away two of the worker's writes.
    assert DURABLE_WRITES_PER_TOOL_ITERATION - PAIRED_DURABLE_WRITES_PER_TOOL_ITERATION == 2
