"""``dagnats dev`` links the web console from its start-up banner, served by its own API."""

from __future__ import annotations

from pathlib import Path

import httpx

from ._dev import start_dev


def test_dev_banner_links_the_console_and_it_is_served(tmp_path: Path) -> None:
    dev = start_dev(["--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0"])
    try:
        assert dev.banner["console"] == f"{dev.api_url}/ui/"
        page = httpx.get(dev.banner["console"], timeout=10.0)
        assert page.status_code == 200
        assert '<script src="console.js">' in page.text
    finally:
        assert dev.stop() == 0
