"""A path the REST reference does not name is a 404 ``not_found`` whatever the method, a
trailing ``/`` included: no API route redirects (Starlette's default sent ``DELETE /runs/`` a
307 to ``/runs``, with a Location built from the request's Host header)."""

from __future__ import annotations

from ._stack import TOKEN, Stack, error_code

GOOD = {"Authorization": f"Bearer {TOKEN}"}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
UNNAMED = ("/runs/", "/workflows/", "/runs/r1/", "/openapi.json/", "/healthz/", "/runs/r1/cancel/")


async def test_a_trailing_slash_is_not_found_never_a_redirect(authed_api: Stack) -> None:
    client = authed_api.client
    for method in METHODS:
        for path in UNNAMED:
            r = await client.request(method, path, headers={**GOOD, "Host": "elsewhere.example"})
            assert r.status_code == 404, (method, path, r.status_code)
            assert "location" not in r.headers, (method, path)
            assert error_code(r) == "not_found", (method, path)
    # The named routes still answer, and the token is still asked for first.
    assert (await client.get("/runs", headers=GOOD)).status_code == 200
    assert (await client.delete("/runs/")).status_code == 401


async def test_the_console_redirect_is_relative(authed_api: Stack) -> None:
    r = await authed_api.client.get("/ui", headers={"Host": "elsewhere.example"})
    assert r.status_code == 308
    assert r.headers["location"] == "/ui/"
    assert (await authed_api.client.post("/ui")).status_code == 405
