"""``Lease``: one task delivery held for an HTTP client, and what every route asks of it first.

The answers a lease gives once it can do no more (fenced, cancelled, settled, expired) and the
translation of the journal's settling exceptions into those answers live here, so each route
checks a lease the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar, final

import attrs
import trio

from ..inputs import PlacementState
from ..journal import (
    Committed,
    DeliveryState,
    Fenced,
    Journal,
    JournalCorrupt,
    JournalUnreadable,
    RestartLimit,
    Settlement,
    Stale,
)
from ..protocol import JournalRecord, TaskMessage
from ..transport import Delivery, TransportError
from ._errors import BridgeError, cancelled, fenced, gone

_log = logging.getLogger(__name__)

T = TypeVar("T")


@final
@attrs.define(eq=False)
class Lease:
    """One delivery held for a client. ``lapsed``: the client went quiet for longer than the
    AckWait, so the bridge stopped extending it and the task is left for redelivery; it never
    revives. ``finished`` is the answer (status, code, message) every later request gets once
    the task was settled for this lease."""

    token: str
    task_type: str
    task: TaskMessage
    delivery: Delivery
    holder: DeliveryState
    last_contact: float
    journal: Journal | None = None
    journal_wanted: bool = False
    #: The records of the task's iteration as this lease knows them: read at its first
    #: ``journal/append``, then extended by each of its appends (the lease is the only writer
    #: while its claim holds), so each append is checked against the positions before it.
    known: list[tuple[int, JournalRecord]] | None = None
    state_set: bool = False
    lapsed: bool = False
    finished: tuple[int, str, str] | None = None
    placement: PlacementState = attrs.field(factory=PlacementState)
    lock: trio.Lock = attrs.field(factory=trio.Lock)

    @property
    def inactive(self) -> bool:
        h = self.holder
        return self.lapsed or self.finished is not None or h.fenced or h.cancelled or h.killed


def expired() -> BridgeError:
    """The answer of a lease whose client went quiet for longer than the AckWait."""
    return gone(
        "lease_expired",
        "no request came within the AckWait, so the task was left for redelivery",
    )


def check_active(lease: Lease) -> None:
    """Raise the answer of a lease that can do nothing more."""
    h = lease.holder
    if h.fenced:
        raise fenced("a successor claimed this task's journal; this lease writes nothing more")
    if h.cancelled:
        raise cancelled(lease.task.run_id)
    if lease.finished is not None:
        raise BridgeError(*lease.finished)
    if h.killed:
        raise gone("killed", "this lease was killed at a crash seam")
    if lease.lapsed and lease.journal is None:
        raise expired()


def check_claim_stored(lease: Lease) -> None:
    """A lease that asked for its journal settles through it: refuse while the claim is
    missing."""
    if lease.journal is None and lease.journal_wanted:
        raise BridgeError(
            503,
            "journal_unavailable",
            "the journal was asked for but its claim never stored; retry journal/read, or "
            "stop and let the task be redelivered (it cannot be settled outside the journal)",
        )


async def ack(lease: Lease) -> None:
    """Ack the delivery; a failed ack is logged (the task is then redelivered and found done)."""
    try:
        lease.delivery.ack_nowait()
    except TransportError as exc:
        _log.warning("ack of %s failed: %s", lease.delivery.subject, exc)
    await trio.lowlevel.checkpoint()


async def finish(lease: Lease, status: int, code: str, message: str) -> BridgeError:
    """Settled for this lease (stale, committed, restart limit, settled): ack, remember."""
    lease.finished = (status, code, message)
    if lease.holder.settlement is Settlement.ACK:
        await ack(lease)
    return BridgeError(status, code, message)


async def journal_call(lease: Lease, fn: Callable[[], Awaitable[T]]) -> T:
    """Run a journal operation; its settling exceptions become the bridge's answers."""
    try:
        return await fn()
    except Fenced as exc:
        raise fenced(str(exc)) from None
    except Stale as exc:
        raise await finish(lease, 410, "stale", str(exc)) from None
    except Committed as exc:
        raise await finish(lease, 410, "committed", str(exc)) from None
    except RestartLimit as exc:
        raise await finish(lease, 410, "restart_limit", str(exc)) from None
    except JournalUnreadable as exc:
        raise await finish(lease, 410, "journal_unreadable", str(exc)) from None
    except JournalCorrupt as exc:
        raise BridgeError(500, "journal_corrupt", str(exc)) from None
