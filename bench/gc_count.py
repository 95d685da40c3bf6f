"""Garbage collections per run and the CPU they take: whether the collector is worth tuning.

A count and a CPU time per generation, through the public ``gc.callbacks`` hook (called by the
interpreter at the start and the end of every collection), installed only around the measured
runs. It settles by measurement whether the embedding service should call ``gc.freeze()`` after
startup or raise ``gc.set_threshold``: global settings that are the application's choice, never
the library's.
"""

from __future__ import annotations

import gc
import time
from types import TracebackType
from typing import Any, Final, final

#: Generations the interpreter collects (0, 1, 2).
GC_GENERATIONS: Final = 3


@final
class GcCounter:
    """``with GcCounter() as counter:``: collections per generation and their CPU seconds (the
    process's CPU clock, as the CPU per run is measured) while inside."""

    def __init__(self) -> None:
        self.collections = [0] * GC_GENERATIONS
        self.cpu_s = 0.0
        self._started: float | None = None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
            return
        if self._started is None:  # installed while a collection was running
            return
        self.cpu_s += time.process_time() - self._started
        self._started = None
        self.collections[info["generation"]] += 1

    def __enter__(self) -> GcCounter:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        gc.callbacks.remove(self._callback)


def print_gc(counter: GcCounter, runs: int, cpu_ms_per_run: float) -> dict[str, float]:
    """Prints collections and GC CPU per run; returns the headline figures."""
    per_gen = ", ".join(f"gen{g} {n / runs:.2f}" for g, n in enumerate(counter.collections))
    gc_ms = counter.cpu_s * 1000 / runs
    share = gc_ms / cpu_ms_per_run * 100 if cpu_ms_per_run > 0 else 0.0
    print(f"  garbage collections per run: {per_gen}; "
          f"their CPU: {gc_ms:.3f} ms per run ({share:.1f} % of the CPU per run)")  # fmt: skip
    return {
        "profile_gc_collections_per_run": round(sum(counter.collections) / runs, 2),
        "profile_gc_ms_per_run": round(gc_ms, 3),
    }
