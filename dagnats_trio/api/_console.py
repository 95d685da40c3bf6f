"""The web console's static files, served at ``/ui/`` by the API's own app (docs/console.md).

Plain HTML, CSS and JavaScript shipped in the package (``console/``), with no build step: the
page talks to the same REST API and SSE streams as any client, with the same bearer token. The
files carry no data, so they are served without the token (the page asks for it, once per tab);
every API route still needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import RedirectResponse
    from starlette.routing import BaseRoute

#: Where the console is served; ``/ui`` redirects to ``/ui/``.
CONSOLE_PREFIX: Final = "/ui"
#: The files, inside the package (so in the wheel).
CONSOLE_DIR: Final = Path(__file__).resolve().parent / "console"


def console_routes() -> list[BaseRoute]:
    """The console's static files (``index.html`` at ``/ui/``), and ``/ui`` sent there.

    Starlette is imported here, not at the top: the package's ``__init__`` names
    :func:`console_url`, and a worker-only host loads the package but serves no HTTP."""
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    return [
        Route(CONSOLE_PREFIX, _to_console, methods=["GET", "HEAD"]),
        Mount(CONSOLE_PREFIX, app=StaticFiles(directory=CONSOLE_DIR, html=True), name="ui"),
    ]


async def _to_console(request: Request) -> RedirectResponse:
    """A relative ``Location``: the console's address never comes from the Host header."""
    from starlette.responses import RedirectResponse

    return RedirectResponse(f"{CONSOLE_PREFIX}/", status_code=308)


def console_url(api_url: str, run_id: str | None = None) -> str:
    """The console's address on an API at ``api_url``, opened on ``run_id`` when given."""
    base = f"{api_url.rstrip('/')}{CONSOLE_PREFIX}/"
    return f"{base}#/runs/{run_id}" if run_id else base
