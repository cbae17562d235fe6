"""The app's own endpoint, over HTTP: a batch is one POST of the JSON list of ids, answered with a
JSON object of id -> text (an id left out, or null, is missing). The answer is read with a bound
on its size; at start an empty list must be answered with an object."""
from __future__ import annotations

import json
from typing import Any, Sequence

import aiohttp

from ctxprec.collector.resolving.config import HttpSource
from ctxprec.collector.resolving.stores import StoreError
from ctxprec.scorer.http_body import read_body


class HttpStore:
    def __init__(self, config: HttpSource, secret: str | None) -> None:
        self.config = config
        self._headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.timeout_s))
        await self.fetch([])

    async def fetch(self, ids: Sequence[str]) -> dict[str, str]:
        assert self._session is not None
        async with self._session.post(self.config.url, json=list(ids), headers=self._headers) as response:
            if response.status != 200:
                raise StoreError(f"the endpoint answered HTTP {response.status}")
            body = await read_body(response, int(self.config.max_response_mb * 1024 * 1024))
        try:
            answer: Any = json.loads(body)
        except ValueError:
            raise StoreError("the endpoint's answer is not JSON") from None
        if not isinstance(answer, dict):
            raise StoreError(f"the endpoint answered a JSON {type(answer).__name__}, not an object of id -> text")
        wanted = set(ids)
        return {key: text for key, text in answer.items() if key in wanted and isinstance(text, str)}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
