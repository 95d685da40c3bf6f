"""The places a worker has for deliveries in hand (its ``concurrency``), shared by its pull loops.

A pull loop asks the server for as many deliveries as there are free places (up to a fetch's
batch), so it must hold those places while the server answers, and give back the ones the fetch
did not fill; each delivery gives its place back when it ends. A ``trio.Semaphore`` does this one
place per call: a fetch that asked for 16 and got the one task a sequential run brings cost 16
acquires and 15 releases (about 250 Python calls per agent run). Here a reservation and a
give-back are one call each, whatever their size; a give-back still hands one place to each
loop waiting before anything is left free, as a semaphore's releases do, so the loop that gave
back cannot take every place again while the loops of the other task types wait.
"""

from __future__ import annotations

from typing import final

import trio


@final
class Slots:
    """``total`` places; :meth:`take` reserves some, :meth:`give_back` returns them."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"a worker needs at least one place, got {total}")
        self._total = total
        self._free = total
        self._waiting = trio.lowlevel.ParkingLot()

    @property
    def free(self) -> int:
        return self._free

    @property
    def waiting(self) -> int:
        """Calls of :meth:`take` parked until a place is given back (a pull loop with nothing
        free and nothing asked): a place freed now is owed to them, not kept by its loop."""
        return len(self._waiting)

    async def take(self, most: int) -> int:
        """Reserve as many free places as there are, at most ``most`` (at least one): at once
        when one is free (no scheduler pass: the caller's fetch right after waits on the server,
        its checkpoint), else after waiting (cancellable, first come first served) until a place
        is handed to this call, then with the free places beside it."""
        if most < 1:
            raise ValueError(f"take at least one place, got {most}")
        if self._free == 0:
            # Parked: a give-back hands this call one place before anything is left free (as
            # a semaphore's release does), so a loop that gives back and takes again at once
            # cannot keep every place from the loops waiting (one per task type).
            await self._waiting.park()
            extra = min(most - 1, self._free)
            self._free -= extra
            return 1 + extra
        taken = min(most, self._free)
        self._free -= taken
        return taken

    def give_back(self, n: int) -> None:
        """Return ``n`` places taken before: one to each call waiting (oldest first), the rest
        free."""
        if n < 0 or self._free + n > self._total:
            raise ValueError(f"{n} places given back with {self._free} of {self._total} free")
        handed = min(n, len(self._waiting))
        if handed:
            self._waiting.unpark(count=handed)
        self._free += n - handed
