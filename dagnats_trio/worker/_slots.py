"""The places a worker has for deliveries in hand (its ``concurrency``), shared by its pull loops.

A pull loop asks the server for as many deliveries as there are free places (up to a fetch's
batch), so it must hold those places while the server answers, and give back the ones the fetch
did not fill; each delivery gives its place back when it ends. A ``trio.Semaphore`` does this one
place per call: a fetch that asked for 16 and got the one task a sequential run brings cost 16
acquires and 15 releases (about 250 Python calls per agent run). Here a reservation and a
give-back are one call each, whatever their size.
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
        self._freed = trio.lowlevel.ParkingLot()

    @property
    def free(self) -> int:
        return self._free

    async def take(self, most: int) -> int:
        """Reserve as many free places as there are, at most ``most`` (at least one): at once
        when one is free (no scheduler pass: the caller's fetch right after waits on the server,
        its checkpoint), else after waiting (cancellable) until a place is given back."""
        if most < 1:
            raise ValueError(f"take at least one place, got {most}")
        while self._free == 0:
            await self._freed.park()
        taken = min(most, self._free)
        self._free -= taken
        return taken

    def give_back(self, n: int) -> None:
        """Return ``n`` places taken before; the loops waiting for one are woken to look."""
        if n < 0 or self._free + n > self._total:
            raise ValueError(f"{n} places given back with {self._free} of {self._total} free")
        self._free += n
        if n and self._freed:
            self._freed.unpark_all()
