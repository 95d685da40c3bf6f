"""What one delivery of a task is doing, shared by the worker, the task context and the journal.

The worker decides from this, not from the exception a handler happened to raise, whether to ack:
a handler may swallow ``Fenced`` or a kill, but the flags here still say what happened.
"""

from __future__ import annotations

import enum
from typing import final

import attrs
import trio

from dagnats_trio._seams import Seam, SeamContext, crash_point, hook_installed

from ._errors import Fenced, HolderKilled
from ._replay import TaskIdentity


class Settlement(enum.Enum):
    """What the worker does with the delivery once the handler is done."""

    ACK = "ack"  # a lifecycle event is out, or nothing is to be done (stale, committed)
    NO_ACK = "no_ack"  # fenced: the successor owns the same task message


@final
@attrs.define(eq=False)
class DeliveryState:
    """The state of one delivery. ``stalled`` > 0 while a seam hook blocks: the background
    heartbeat stops then, as it would in a stalled process, so the AckWait can run out."""

    task: TaskIdentity
    worker_id: str = ""
    settlement: Settlement | None = None
    killed: bool = False
    cancelled: bool = False
    stalled: int = 0
    scope: trio.CancelScope | None = None
    #: Why this holder was fenced (said again by every later write it attempts).
    fenced_because: str = ""
    #: Why the delivery's lease was lost ("": it was not): a heartbeat failed or found the holder
    #: fenced. The delivery is then cancelled and neither settled nor acked: it is redelivered.
    lease_lost_because: str = ""

    @property
    def fenced(self) -> bool:
        return self.settlement is Settlement.NO_ACK

    def kill(self) -> None:
        self.killed = True
        if self.scope is not None:
            self.scope.cancel()

    def fence(self, because: str = "a successor claimed the journal") -> None:
        self.settlement = Settlement.NO_ACK
        self.fenced_because = because

    def lose_lease(self, because: str) -> None:
        """The heartbeat's verdict: this delivery no longer holds its task; stop its work."""
        if not self.lease_lost_because:
            self.lease_lost_because = because
        if self.scope is not None:
            self.scope.cancel()

    def cancel(self) -> None:
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()

    def check_writable(self) -> None:
        """Raise unless this holder may still write: a dead or fenced holder writes nothing."""
        if self.killed:
            raise HolderKilled("this holder was killed at a crash seam")
        if self.settlement is Settlement.NO_ACK:  # ``fenced``, without a property call per write
            raise Fenced(f"{self.fenced_because}; this holder writes nothing more")

    async def seam(self, seam: Seam) -> None:
        """Reach a crash seam: a hook that raises kills this holder, one that blocks stalls it.
        Without a hook it returns at once: no context is built, nothing awaited. The journal's
        callers test ``current_hook() is not None`` before calling it, so production (where no
        hook is installed) does not even make the call."""
        if not hook_installed():
            return
        t = self.task
        self.stalled += 1
        try:
            await crash_point(
                SeamContext(seam, t.run_id, t.step_id, t.iteration, t.attempt, self.worker_id)
            )
        except trio.Cancelled:
            raise
        except Exception as exc:
            self.kill()
            raise HolderKilled(f"killed at crash seam {seam.value}") from exc
        finally:
            self.stalled -= 1
