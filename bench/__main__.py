"""``python -m bench [section ...]``: run benchmark sections, ``append_ratio=`` printed last.

``python -m bench scale [--kill-node] [--runs=N]`` (``just bench scale``) runs the scale-out
benchmark on a 3-node cluster (``bench.scale``); it runs only when named.

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
    "spread": "bench.spread",
    "journal_open": "bench.journal_open",
    "append": "bench.append",
    "takeover": "bench.takeover",
    "client": "bench.client",
    "listing": "bench.listing",
    "batch": "bench.batch",
}
#: Sections run only when named (minutes of their own): ``just bench scale``.
ON_DEMAND: dict[str, str] = {
    "scale": "bench.scale",
    "latency": "bench.latency",
}

#: Printed last of all, so scripts can read it with ``tail -1``.
LAST_FIGURE = "append_ratio"


#: Flags: ``--quick`` asks every section that takes ``quick`` for a shorter measurement.
QUICK_FLAG = "--quick"
#: Section options: ``--kill-node`` and ``--runs=N`` go to each named section whose ``run``
#: takes ``kill_node`` / ``runs`` (``just bench scale --kill-node --runs=200``).
SECTION_OPTIONS: dict[str, str] = {"--kill-node": "kill_node", "--runs": "runs"}
#: ``--profile`` runs the profile of the scripted agent (``bench.profile``) instead of sections.
PROFILE_FLAG = "--profile"


def main(argv: list[str]) -> int:
    quick = QUICK_FLAG in argv
    options: dict[str, object] = {}
    rest: list[str] = []
    for arg in argv:
        flag, eq, given = arg.partition("=")
        if flag not in SECTION_OPTIONS:
            rest.append(arg)
        elif not eq:
            options[SECTION_OPTIONS[flag]] = True
        elif given.isdigit() and int(given) > 0:
            options[SECTION_OPTIONS[flag]] = int(given)
        else:
            print(f"{flag} takes a positive whole number, got {given!r}", file=sys.stderr)
            return 2
    argv = rest
    if PROFILE_FLAG in argv:
        extra = [arg for arg in argv if arg not in (QUICK_FLAG, PROFILE_FLAG)]
        if extra:
            print(f"--profile takes no sections, got {extra}", file=sys.stderr)
            return 2
        names = ["profile"]
        sections = {"profile": "bench.profile"}
    else:
        names = [arg for arg in argv if arg != QUICK_FLAG] or list(SECTIONS)
        sections = {**SECTIONS, **ON_DEMAND}
    unknown = [name for name in names if name not in sections]
    if unknown:
        print(f"unknown section(s) {unknown}; known: {[*SECTIONS, *ON_DEMAND]}", file=sys.stderr)
        return 2
    runs = {name: importlib.import_module(sections[name]).run for name in names}
    for key in options:
        if not any(key in inspect.signature(run).parameters for run in runs.values()):
            print(f"no section of {names} takes --{key.replace('_', '-')}", file=sys.stderr)
            return 2
    figures: dict[str, float] = {}
    for name in names:
        run: Callable[..., dict[str, float]] = runs[name]
        params = inspect.signature(run).parameters
        kwargs = {key: value for key, value in {"quick": quick, **options}.items() if key in params}
        figures.update(run(**kwargs))
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
