"""The HTTP session of a result sink's backend (Phoenix, Langfuse): one pooled aiohttp session
with the backend's headers, made when the sink starts and closed when it stops."""
from __future__ import annotations

import aiohttp


class HttpBackend:
    def __init__(self, headers: dict[str, str], timeout_s: float) -> None:
        self._headers = headers
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "start() first"
        return self._session

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                                                  headers=self._headers)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
