"""The outage scenarios in a process of their own: ``python tests/_outage_run.py RESULT TMP
NAME...`` runs the named scenarios side by side (:func:`_outage.ride_out_at_once`) and pickles
what each returned or raised, with what it logged, to the file RESULT.

tests/conftest.py starts it as soon as the session's tests are collected, so the 90 s outage is
waited out while the rest of the suite runs. Under pytest-xdist every worker collects every test:
the first to claim the directory the controller handed out starts the one process, and the others
read its result file there (:meth:`OutageChild.start`), so the scenarios run once per session.

A process, not a thread: Trio's scheduler draws from one module-level random source and the crash
seams are process-wide hooks, so a Trio loop beside the suite's would change the seeded soaks'
traces and could run into another test's seam hook.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Final

import attrs
from _outage import Ridden, ScenarioFailed, ride_out_at_once

#: Bound on the scenarios' process: every bound of the slowest scenario (three process starts,
#: the waits for /healthz, the 90 s outage, the recovery, three stops) added up, rounded up.
CHILD_BOUND_S: Final = 600.0
#: Bound on its stop (SIGTERM to its process group), when a session ends before it did.
CHILD_STOP_S: Final = 30.0
#: How much of its output a failure shows.
OUTPUT_TAIL_CHARS: Final = 4000
#: Pause between two looks for the result file, in a worker that did not start the process (it
#: is another worker's child: no wait() on it from here).
RESULT_LOOK_EVERY_S: Final = 0.5
#: Written by the process when it ends, whether it wrote a result or not.
ENDED_FILE: Final = "ended"
HERE: Final = Path(__file__).resolve().parent


def scenarios(tmp: Path) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every outage scenario by the name its test's ``@pytest.mark.outage`` gives."""
    from cli._outage_processes import ride_out_as_processes
    from e2e._outage_stack import ride_out_in_process

    return {
        "native": partial(ride_out_in_process, "native"),
        "nats-py": partial(ride_out_in_process, "nats-py"),
        "processes": partial(ride_out_as_processes, tmp),
    }


@attrs.define
class OutageChild:
    """The process running the scenarios, its scratch directory and its result file. ``proc`` is
    None in an xdist worker that found another worker had started it in the shared directory."""

    proc: subprocess.Popen[bytes] | None
    tmp: Path
    #: Whether :meth:`stop` deletes ``tmp`` (not an xdist directory: the controller does that).
    owns_tmp: bool = True
    _outcomes: dict[str, Ridden] | None = None

    @classmethod
    def start(cls, names: Iterable[str], shared: Path | None = None) -> OutageChild:
        """Start the process in a new scratch directory, or in ``shared`` (xdist's) when this
        worker is the first to claim it; a later worker gets the started one's files instead."""
        if shared is None:
            tmp = Path(tempfile.mkdtemp(prefix="dagnats-outage-"))
        else:
            try:
                (shared / "claimed").mkdir()
            except FileExistsError:
                return cls(None, shared, owns_tmp=False)
            tmp = shared
        with (tmp / "output.log").open("wb") as output:
            command = [sys.executable, str(HERE / "_outage_run.py"), str(tmp / "result"), str(tmp)]
            proc = subprocess.Popen(
                [*command, *sorted(names)],
                cwd=HERE,
                start_new_session=True,  # a group of its own: stop() ends all of it
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        return cls(proc, tmp, owns_tmp=shared is None)

    def outcomes(self) -> dict[str, Ridden]:
        """Each scenario's outcome, once the process has ended (within :data:`CHILD_BOUND_S`)."""
        if self._outcomes is None:
            rc = self.proc.wait(CHILD_BOUND_S) if self.proc is not None else self._wait_ended()
            result = self.tmp / "result"
            if rc != 0 or not result.exists():
                output = (self.tmp / "output.log").read_text(errors="replace")
                raise ScenarioFailed(
                    f"the outage scenarios' process exited {rc}:\n{output[-OUTPUT_TAIL_CHARS:]}"
                )
            self._outcomes = pickle.loads(result.read_bytes())
        return self._outcomes

    def _wait_ended(self) -> int | None:
        """The exit status another worker's process wrote when it ended (None: not said)."""
        ended = self.tmp / ENDED_FILE
        deadline = time.monotonic() + CHILD_BOUND_S
        while not ended.exists():
            if time.monotonic() > deadline:
                return None
            time.sleep(RESULT_LOOK_EVERY_S)
        text = ended.read_text().strip()
        return int(text) if text.lstrip("-").isdigit() else None

    def stop(self, wait_for_others: bool = False) -> None:
        """End whatever of the process's group still runs, drop its files. The group: the
        ``dagnats`` processes a scenario starts die with it only when it stops them itself.
        ``wait_for_others``: another xdist worker may still ask for the outcomes, so let the
        process end by itself first (within :data:`CHILD_BOUND_S`)."""
        if self.proc is None:
            return
        if wait_for_others:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(CHILD_BOUND_S)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(CHILD_STOP_S)
                break
            except subprocess.TimeoutExpired:
                continue
        if self.owns_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _portable(ridden: Ridden) -> Ridden:
    """The error as its traceback's text: what the test shows when it raises it again."""
    if ridden.error is None:
        return ridden
    text = "".join(traceback.format_exception(ridden.error))
    return Ridden(None, ScenarioFailed(text), ridden.said)


def main(argv: list[str]) -> None:
    result, tmp, *names = argv
    rc = 1
    try:
        chosen = {name: run for name, run in scenarios(Path(tmp)).items() if name in names}
        ridden = {name: _portable(r) for name, r in ride_out_at_once(chosen).items()}
        written = Path(result).with_suffix(".part")
        written.write_bytes(pickle.dumps(ridden))
        written.replace(result)  # whole or absent, for a reader in another process
        rc = 0
    finally:
        (Path(tmp) / ENDED_FILE).write_text(f"{rc}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
