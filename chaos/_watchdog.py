"""A wall-clock bound for the simulated soak.

The simulated soak runs on Trio's autojump clock and never reads the wall clock, so a bound on
it must come from outside the run: a timer thread that interrupts the main thread. It cannot
change the soak's trace.
"""

from __future__ import annotations

import _thread
import threading


class WallWatchdog:
    """Interrupts the main thread (``KeyboardInterrupt``) once ``seconds`` of wall time pass;
    ``fired`` says whether it did."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        _thread.interrupt_main()

    def __enter__(self) -> WallWatchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
