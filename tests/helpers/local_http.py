"""A real aiohttp application served on 127.0.0.1 and a free port for the length of a test, for
servers the stub judge does not play (a result sink's backend that misbehaves)."""
from __future__ import annotations

import contextlib
from typing import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """Yields the base URL (`http://127.0.0.1:PORT`); the server is stopped on the way out."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()
