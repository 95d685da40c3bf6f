"""Starting a nats-server child that cannot outlive the process that started it.

On Linux the child asks the kernel for a parent-death signal (``prctl(PR_SET_PDEATHSIG)``) between
fork and exec, so a SIGKILLed ``dagnats dev`` (or a crashed test run) takes its server with it
instead of leaving it on the port and the store with parent PID 1.

The kernel sends that signal when the *thread* that forked the child ends, not the process. Trio's
``open_process`` forks in a worker thread of its thread cache, and an idle worker thread exits
after a few seconds: the server would be killed soon after it started. So :class:`ServerProcess`
forks in the calling thread (for a Trio caller, the thread running ``trio.run``, which lives as
long as the run) and waits for the exit through a pidfd, as Trio does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import IO, Final, final

import trio

#: What the kernel sends the server when its parent thread dies: nobody is left to stop it
#: cleanly, and SIGKILL cannot be caught or ignored, so the bound holds. A single server's store
#: fsyncs every publish and a cluster has replicas, so nothing acknowledged is lost.
PARENT_DEATH_SIGNAL: Final = signal.SIGKILL
#: ``prctl`` option number, from ``<linux/prctl.h>``.
_PR_SET_PDEATHSIG: Final = 1
#: Pause between exit checks where no pidfd can be had (not Linux, or a kernel before 5.3).
EXIT_POLL_INTERVAL_S: Final = 0.05


def die_with_parent_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` that arms the parent-death signal (None where there is none).

    Build it in the process that spawns (it records that process's pid and loads ``prctl``
    there); the forked child only makes the call. For ``subprocess.Popen`` callers that fork in
    a thread living as long as the child.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent_pid = os.getpid()

    def die_with_parent() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent_pid:  # the parent died before the signal was armed
            os._exit(1)

    return die_with_parent


@final
class ServerProcess:
    """A child process forked by the calling thread, with a Trio-friendly :meth:`wait`."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):
            self._pidfd = None  # polled instead

    @classmethod
    def spawn(
        cls, argv: Sequence[str], *, log: IO[bytes], pass_fds: Sequence[int] = ()
    ) -> ServerProcess:
        """Fork and exec ``argv`` now, in this thread (see the module's docstring for why);
        stdout and stderr go to ``log``, ``pass_fds`` stay open in the child."""
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=tuple(pass_fds),
            preexec_fn=die_with_parent_preexec(),
        )
        return cls(popen)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """None while the child runs (checked now, as ``trio.Process`` does)."""
        return self.poll()

    def poll(self) -> int | None:
        code = self._popen.poll()
        if code is not None:
            self._close_pidfd()
        return code

    def send_signal(self, sig: signal.Signals) -> None:
        self._popen.send_signal(sig)

    def kill(self) -> None:
        self._popen.kill()

    async def wait(self) -> int:
        """The exit code, once the child has exited (and been reaped)."""
        await trio.lowlevel.checkpoint()
        while (code := self.poll()) is None:
            if self._pidfd is not None:
                await trio.lowlevel.wait_readable(self._pidfd)
            else:
                await trio.sleep(EXIT_POLL_INTERVAL_S)
        return code

    def _close_pidfd(self) -> None:
        fd, self._pidfd = self._pidfd, None
        if fd is not None:
            with contextlib.suppress(RuntimeError):  # outside a Trio run nobody waits on it
                trio.lowlevel.notify_closing(fd)
            os.close(fd)
