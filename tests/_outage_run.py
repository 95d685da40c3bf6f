"""The outage scenarios in a process of their own: ``python tests/_outage_run.py RESULT TMP
NAME...`` runs the named scenarios side by side (:func:`_outage.ride_out_at_once`) and pickles
what each returned or raised, with what it logged, to the file RESULT.

tests/conftest.py starts it as soon as the session's tests are collected, so the 90 s outage is
waited out while the rest of the suite runs. A process, not a thread: Trio's scheduler draws from
one module-level random source and the crash seams are process-wide hooks, so a Trio loop beside
the suite's would change the seeded soaks' traces and could run into another test's seam hook.
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
    """The process running the scenarios, its scratch directory and its result file."""

    proc: subprocess.Popen[bytes]
    tmp: Path
    _outcomes: dict[str, Ridden] | None = None

    @classmethod
    def start(cls, names: Iterable[str]) -> OutageChild:
        tmp = Path(tempfile.mkdtemp(prefix="dagnats-outage-"))
        with (tmp / "output.log").open("wb") as output:
            command = [sys.executable, str(HERE / "_outage_run.py"), str(tmp / "result"), str(tmp)]
            proc = subprocess.Popen(
                [*command, *sorted(names)],
                cwd=HERE,
                start_new_session=True,  # a group of its own: stop() ends all of it
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        return cls(proc, tmp)

    def outcomes(self) -> dict[str, Ridden]:
        """Each scenario's outcome, once the process has ended (within :data:`CHILD_BOUND_S`)."""
        if self._outcomes is None:
            rc = self.proc.wait(CHILD_BOUND_S)
            result = self.tmp / "result"
            if rc != 0 or not result.exists():
                output = (self.tmp / "output.log").read_text(errors="replace")
                raise ScenarioFailed(
                    f"the outage scenarios' process exited {rc}:\n{output[-OUTPUT_TAIL_CHARS:]}"
                )
            self._outcomes = pickle.loads(result.read_bytes())
        return self._outcomes

    def stop(self) -> None:
        """End whatever of the process's group still runs, drop its files. The group: the
        ``dagnats`` processes a scenario starts die with it only when it stops them itself."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(CHILD_STOP_S)
                break
            except subprocess.TimeoutExpired:
                continue
        shutil.rmtree(self.tmp, ignore_errors=True)


def _portable(ridden: Ridden) -> Ridden:
    """The error as its traceback's text: what the test shows when it raises it again."""
    if ridden.error is None:
        return ridden
    text = "".join(traceback.format_exception(ridden.error))
    return Ridden(None, ScenarioFailed(text), ridden.said)


def main(argv: list[str]) -> None:
    result, tmp, *names = argv
    chosen = {name: run for name, run in scenarios(Path(tmp)).items() if name in names}
    ridden = {name: _portable(r) for name, r in ride_out_at_once(chosen).items()}
    Path(result).write_bytes(pickle.dumps(ridden))


if __name__ == "__main__":
    main(sys.argv[1:])
