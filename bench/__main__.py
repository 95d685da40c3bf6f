"""``python -m bench [section ...]``: run benchmark sections, ``append_ratio=`` printed last.

``python -m bench --profile`` (``just bench --profile``) runs the scripted agent under cProfile
instead (``bench.profile``): CPU per run, per component, and the top entries.

To add a section, add its module to :data:`SECTIONS`; the module has ``run() -> dict[str, float]``
(optionally ``run(*, quick: bool)``, for ``--quick``) that prints its own report and returns its
headline figures.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable

#: Section name -> module with a ``run()``. Order is the order they run in.
SECTIONS: dict[str, str] = {
    "loop": "bench.loop",
    "agent": "bench.agent",
    "journal_open": "bench.journal_open",
    "append": "bench.append",
    "takeover": "bench.takeover",
    "client": "bench.client",
    "listing": "bench.listing",
    "batch": "bench.batch",
}

#: Printed last of all, so scripts can read it with ``tail -1``.
LAST_FIGURE = "append_ratio"


#: Flags: ``--quick`` asks every section that takes ``quick`` for a shorter measurement.
QUICK_FLAG = "--quick"
#: ``--profile`` runs the profile of the scripted agent (``bench.profile``) instead of sections.
PROFILE_FLAG = "--profile"


def main(argv: list[str]) -> int:
    quick = QUICK_FLAG in argv
    if PROFILE_FLAG in argv:
        extra = [arg for arg in argv if arg not in (QUICK_FLAG, PROFILE_FLAG)]
        if extra:
            print(f"--profile takes no sections, got {extra}", file=sys.stderr)
            return 2
        names = ["profile"]
        sections = {"profile": "bench.profile"}
    else:
        names = [arg for arg in argv if arg != QUICK_FLAG] or list(SECTIONS)
        sections = SECTIONS
    unknown = [name for name in names if name not in sections]
    if unknown:
        print(f"unknown section(s) {unknown}; known: {list(SECTIONS)}", file=sys.stderr)
        return 2
    figures: dict[str, float] = {}
    for name in names:
        run: Callable[..., dict[str, float]] = importlib.import_module(sections[name]).run
        takes_quick = "quick" in inspect.signature(run).parameters
        figures.update(run(quick=quick) if takes_quick else run())
        print()
    print("== summary")
    for key, value in figures.items():
        if key != LAST_FIGURE:
            print(f"{key}={value}")
    if LAST_FIGURE in figures:
        print(f"{LAST_FIGURE}={figures[LAST_FIGURE]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
