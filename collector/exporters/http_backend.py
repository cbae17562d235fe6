"""The HTTP session of a result sink's backend (Phoenix, Langfuse): one pooled aiohttp session
with the backend's headers, made when the sink starts and closed when it stops, and the backend's
answers read with a bound on their size."""
from __future__ import annotations

import aiohttp
from ctxprec.scorer.http_body import BodyTooLarge, read_text

# A backend's answer is a status and a short JSON document (which items it refused and why).
MAX_ANSWER_BYTES = 1024 * 1024


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

    @staticmethod
    async def answer_text(response: aiohttp.ClientResponse) -> str:
        """The answer's text; one longer than MAX_ANSWER_BYTES is not read, and its status alone
        decides what happens to the items."""
        try:
            return await read_text(response, MAX_ANSWER_BYTES)
        except BodyTooLarge as exc:
            return f"(answer not read: {exc})"

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
