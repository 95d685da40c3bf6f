"""HTTP clients of the tests' own stacks, which serve plain http on loopback.

``httpx.AsyncClient()`` loads certifi's trust roots into a new SSL context when it is built,
which is most of the cost of a stack's client, and the api and bridge stacks build one per
test. Their URLs are ``http://``: a context with no roots is never used, and a request that did
meet TLS would fail its check instead of passing unchecked (as ``dagnats_trio.cli._client``
does for the verbs).
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx


def plain_http_client(base_url: str, **kwargs: Any) -> httpx.AsyncClient:
    """``httpx.AsyncClient(base_url=..., **kwargs)`` for an ``http://`` URL, without TLS roots."""
    assert base_url.startswith("http://"), base_url
    return httpx.AsyncClient(
        base_url=base_url, verify=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), **kwargs
    )
