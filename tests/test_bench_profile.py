"""``just bench --profile`` (issue 12 item 3): CPU per component, charged as documented.

The profile itself runs a server and two hundred agent runs (the benchmark's job); here the
attribution rules are checked on a profile of known shape, and the flag's command line.
"""

from __future__ import annotations

import gc
import types
from typing import Any

import pytest
import trio

from bench.__main__ import main
from bench.gc_count import GcCounter, print_gc
from bench.profile import OTHER, component_of, own_time_by_component
from bench.steps import StepCounter, print_steps

CODEC = component_of("/venv/dagnats_trio/protocol/_codec.py")
TRIO = component_of("/venv/site-packages/trio/_core/_run.py")
JOURNAL = component_of("/src/dagnats_trio/journal/_handle.py")
NATS = component_of("/src/dagnats_trio/nats/_parser.py")


def test_modules_map_to_their_components() -> None:
    assert len({CODEC, TRIO, JOURNAL, NATS, OTHER}) == 5
    assert component_of("<cattrs generated unstructure dagnats_trio.protocol.tasks.X>") == CODEC
    assert component_of("<attrs generated methods trio._core._run.CancelScope>") == TRIO
    assert component_of("<attrs generated methods dagnats_trio.nats._events.Msg>") == NATS
    assert component_of("/usr/lib/python3.11/logging/__init__.py") == OTHER


def test_helpers_are_charged_to_their_callers() -> None:
    codec_fn = ("/src/dagnats_trio/protocol/_codec.py", 1, "to_json")
    trio_fn = ("/venv/trio/_core/_run.py", 2, "unrolled_run")
    journal_fn = ("/src/dagnats_trio/journal/_handle.py", 3, "model")
    stats: dict[Any, Any] = {
        # A C function called by the codec (3/4 of its time) and by trio (1/4).
        ("~", 0, "<built-in method builtins.isinstance>"): (
            4, 4, 0.4, 0.4, {codec_fn: (3, 3, 0.3, 0.3), trio_fn: (1, 1, 0.1, 0.1)},
        ),
        # attrs' evolve, called by the journal only.
        ("/venv/attr/_make.py", 5, "evolve"): (1, 1, 0.2, 0.2, {journal_fn: (1, 1, 0.2, 0.2)}),
        # A C function called only by another C function: nobody to charge but OTHER.
        ("~", 0, "<built-in method builtins.len>"): (
            1, 1, 0.05, 0.05, {("~", 0, "<method 'send'>"): (1, 1, 0.05, 0.05)},
        ),
        codec_fn: (1, 1, 1.0, 1.3, {}),
        trio_fn: (1, 1, 2.0, 2.1, {}),
        journal_fn: (1, 1, 0.5, 0.7, {}),
    }  # fmt: skip
    got = own_time_by_component(types.SimpleNamespace(stats=stats))  # type: ignore[arg-type]
    assert got == pytest.approx({CODEC: 1.3, TRIO: 2.1, JOURNAL: 0.7, OTHER: 0.05})


def test_profile_takes_no_sections() -> None:
    assert main(["--profile", "agent"]) == 2


def test_steps_are_counted_per_task_and_passes_per_wait() -> None:
    """``bench.steps``: each resumption of a task is a step, charged to its name; every pass of
    Trio's run loop (one wait for I/O each) is counted once."""
    checkpoints = 3
    counter = StepCounter()

    async def worker() -> None:
        for _ in range(checkpoints):
            await trio.lowlevel.checkpoint()

    async def main() -> None:
        trio.lowlevel.add_instrument(counter)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker)
        finally:
            trio.lowlevel.remove_instrument(counter)

    trio.run(main)
    # The worker's first step and one after each checkpoint.
    assert counter.steps[f"{__name__}.{worker.__qualname__}"] == checkpoints + 1
    assert counter.passes >= checkpoints + 1
    figures = print_steps(counter, runs=1, top=5)
    assert figures["profile_task_steps_per_run"] == sum(counter.steps.values())
    assert figures["profile_passes_per_run"] == counter.passes


def test_gc_counter_counts_each_collection_by_generation_while_installed() -> None:
    """``bench.gc_count``: every collection made while the counter is installed is counted in
    its generation, with a CPU time; none before or after. Automatic collections are off
    meanwhile, so only the explicit ones happen."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()  # not counted: not installed yet
        with GcCounter() as counter:
            gc.collect(0)
            gc.collect(0)
            gc.collect(2)
        gc.collect()  # not counted: removed
    finally:
        if enabled:
            gc.enable()
    assert counter.collections == [2, 0, 1]
    assert counter.cpu_s >= 0.0
    figures = print_gc(counter, runs=3, cpu_ms_per_run=1.0)
    assert figures["profile_gc_collections_per_run"] == 1.0
    assert figures["profile_gc_ms_per_run"] == round(counter.cpu_s * 1000 / 3, 3)
