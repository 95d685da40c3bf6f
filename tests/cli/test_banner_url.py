"""The start-up banner gives a URL a client can connect to, whatever the API binds.

Found from outside: ``dagnats serve --listen 0.0.0.0:8080`` printed
``export DAGNATS_API_URL=http://0.0.0.0:8080``, an address to bind, not one to connect to.
"""

from __future__ import annotations

import pytest

from dagnats_trio.cli._hosting import reachable_url


@pytest.mark.parametrize(
    ("bound", "reached"),
    [
        ("http://0.0.0.0:8080", "http://127.0.0.1:8080"),
        ("http://[::]:18201", "http://[::1]:18201"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://10.1.2.3:80", "http://10.1.2.3:80"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("http://my-host.example:8080", "http://my-host.example:8080"),
    ],
)
def test_a_wildcard_bind_is_reached_at_loopback(bound: str, reached: str) -> None:
    assert reachable_url(bound) == reached
