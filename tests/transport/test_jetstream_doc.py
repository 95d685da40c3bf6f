"""Every ``python`` block of docs/jetstream.md runs against a real nats-server.

Each block defines ``async def main(url)``; the test executes the block and awaits ``main``.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "jetstream.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
#: Bound of one example.
EXAMPLE_TIMEOUT_S = 20.0


def test_the_page_has_an_example() -> None:
    assert len(BLOCKS) >= 1


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
async def test_doc_example_runs(block: str, nats_url: str) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(block, str(PAGE), "exec"), namespace)
    main: Callable[[str], Awaitable[None]] = namespace["main"]
    with trio.fail_after(EXAMPLE_TIMEOUT_S):
        await main(nats_url)
