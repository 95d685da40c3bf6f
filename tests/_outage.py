"""What the NATS outage tests share: how long the server stays away, their bounds, and the
wait for an API's ``/healthz`` to answer a given status (in process or as a separate process)."""

from __future__ import annotations

from typing import Final

import httpx
import trio

#: How long the server stays down: three times what used to kill the workers for good.
OUTAGE_S: Final = 90.0
#: Bound on the run reaching the unsafe tool, on /healthz seeing the server go, on one request.
START_BOUND_S: Final = 30.0
#: Bound on the run finishing once the server is back (reconnect pauses are capped at 5 s).
RECOVERY_BOUND_S: Final = 60.0
#: Pause between two looks at the run or at /healthz.
LOOK_EVERY_S: Final = 0.2


async def health_answer(http: httpx.AsyncClient, status: int, bound_s: float) -> dict[str, str]:
    """The body of the first ``/healthz`` answer with ``status``, within ``bound_s``."""
    with trio.fail_after(bound_s):
        while True:
            r = await http.get("/healthz")
            if r.status_code == status:
                body: dict[str, str] = r.json()
                return body
            await trio.sleep(LOOK_EVERY_S)
