"""Answers as the OpenAPI document and HTTP say, found by schemathesis against ``dagnats dev``.

A 405 names, in ``Allow``, every method served at the path.

Found from outside (schemathesis' Allow check against ``dagnats dev``): each documented route is
a route of one method, and the 405 named the first route matched alone: ``OPTIONS /runs/{id}``
said ``Allow: HEAD, GET`` though ``DELETE`` is served there too.
"""

from __future__ import annotations

from ._stack import Stack


async def test_a_405_names_every_method_of_its_path(api: Stack) -> None:
    for method, path, allowed in (
        ("OPTIONS", "/runs/r1", "DELETE, GET, HEAD"),
        ("PUT", "/runs", "GET, HEAD, POST"),
        ("DELETE", "/workflows", "GET, HEAD, POST"),
        ("POST", "/runs/r1/steps/s1/inputs/q1", "DELETE, GET, HEAD"),
        ("GET", "/runs/r1/cancel", "POST"),
    ):
        r = await api.client.request(method, path)
        assert r.status_code == 405, (method, path, r.text)
        assert r.headers["allow"] == allowed, (method, path, r.headers.get("allow"))
        assert r.json()["error"]["code"] == "method_not_allowed"


async def test_the_bad_json_400_of_post_workflows_has_what_its_schema_requires(api: Stack) -> None:
    """Found by schemathesis (ST108): the route's 400 schema (an invalid definition's) required
    ``problems``, which its ``invalid_json`` 400 does not carry."""
    document = (await api.client.get("/openapi.json")).json()
    answer = document["paths"]["/workflows"]["post"]["responses"]["400"]
    ref = answer["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    envelope = document["components"]["schemas"][ref]
    inner = envelope["properties"]["error"]["$ref"].rsplit("/", 1)[1]
    required = set(document["components"]["schemas"][inner]["required"])
    r = await api.client.post(
        "/workflows", content=b"\x00", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert required <= set(r.json()["error"]), (required, r.json())
    assert set(envelope["required"]) <= set(r.json())
