"""``/healthz`` says whether NATS answers: down while the server is stopped, up once it is back."""

from __future__ import annotations

import itertools

import httpx
import trio

from dagnats_trio.server import NatsServer
from dagnats_trio.transport import open_nats_transport, provision

from ._stack import Stack, error_code, idle_run, open_stack

#: Bound on /healthz noticing that the server stopped, or that it is back.
HEALTH_CHANGE_S = 30.0
#: Pause between two looks at /healthz while waiting for it to change.
LOOK_EVERY_S = 0.1


async def _health_becomes(api: Stack, status: int) -> tuple[httpx.Response, int]:
    """The first /healthz answer with ``status`` (bounded), and how many answers it took."""
    with trio.fail_after(HEALTH_CHANGE_S):
        for looks in itertools.count(1):
            r = await api.client.get("/healthz")
            if r.status_code == status:
                return r, looks
            await trio.sleep(LOOK_EVERY_S)
    raise AssertionError("unreachable")


async def test_healthz_reports_nats_down_and_back_up(fresh_nats_server: NatsServer) -> None:
    async with open_nats_transport(fresh_nats_server.url, name="pytest-health") as nats:
        await provision(nats)
        async with open_stack(nats, None) as api:
            run_id = await idle_run(api)
            r = await api.client.get("/healthz")
            assert (r.status_code, r.json()) == (200, {"status": "ok", "nats": "up"})

            await fresh_nats_server.stop_process()
            started = trio.current_time()
            r, looks = await _health_becomes(api, 503)
            print(f"nats down seen after {trio.current_time() - started:.2f}s ({looks} looks)")
            assert r.json() == {"status": "unavailable", "nats": "down"}
            r = await api.client.get(f"/runs/{run_id}")
            assert r.status_code == 503
            assert error_code(r) == "unavailable"

            await fresh_nats_server.start()
            started = trio.current_time()
            r, looks = await _health_becomes(api, 200)
            print(f"nats up seen after {trio.current_time() - started:.2f}s ({looks} looks)")
            assert r.json() == {"status": "ok", "nats": "up"}
            r = await api.client.get(f"/runs/{run_id}")
            assert r.status_code == 200
            assert r.json()["run_id"] == run_id
