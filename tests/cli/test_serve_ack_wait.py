"""``dagnats serve --ack-wait`` (issue 16, item 4): serve runs the bridge, whose leases come from
the workers' consumers, so it must be given their AckWait; it had no such option."""

from __future__ import annotations

import json
from typing import Any, Final

import httpx
import trio
from journal._helpers import uid

from dagnats_trio.protocol.layout import TASK_STREAM, worker_durable
from dagnats_trio.transport import open_nats_transport

from ._dev import start_dagnats

#: The AckWait given to serve (not the default 0.8 s).
ACK_WAIT_S: Final = 2.5
#: Bound on one HTTP request.
HTTP_TIMEOUT_S: Final = 20.0
NS_PER_S: Final = 1_000_000_000


def _consumer_config(nats_url: str, task_type: str) -> dict[str, Any]:
    """The task consumer's config as the server holds it (JetStream's consumer info API)."""

    async def go() -> dict[str, Any]:
        async with open_nats_transport(nats_url, name="serve-ack-wait") as t:
            subject = f"$JS.API.CONSUMER.INFO.{TASK_STREAM}.{worker_durable(task_type)}"
            info: dict[str, Any] = json.loads(await t.request(subject, b""))
            return dict(info["config"])

    return trio.run(go)


def test_serve_gives_its_bridge_the_ack_wait(nats_url: str) -> None:
    serve = start_dagnats(
        "serve", ["--nats", nats_url, "--listen", "127.0.0.1:0", "--ack-wait", str(ACK_WAIT_S)]
    )
    try:
        assert serve.banner["ack wait"] == f"{ACK_WAIT_S} s"
        task_type = uid("t")
        with httpx.Client(base_url=serve.api_url, timeout=HTTP_TIMEOUT_S) as http:
            # The first poll creates the workers' consumer of the task type, with serve's AckWait.
            assert http.post(f"/bridge/tasks/{task_type}/poll").status_code == 204
        config = _consumer_config(nats_url, task_type)
        print(f"consumer ack_wait: {config['ack_wait'] / NS_PER_S} s")
        assert config["ack_wait"] == round(ACK_WAIT_S * NS_PER_S)
    finally:
        assert serve.stop() == 0
