"""Redis, through redis-py's asyncio client: a batch is one MGET of the ids' keys, or one pipeline
of HGETs when the text is a hash field. An id goes into its key as written (Redis keys are
binary-safe; the template is the operator's, the id only fills `{id}`)."""
from __future__ import annotations

from typing import Any, Sequence

import redis.asyncio as aioredis

from ctxprec.collector.resolving.config import RedisSource


class RedisStore:
    def __init__(self, config: RedisSource, secret: str | None) -> None:
        self.config = config
        self._secret = secret
        self._client: Any = None

    async def open(self) -> None:
        config = self.config
        self._client = aioredis.from_url(config.url, password=self._secret, socket_timeout=config.timeout_s,
                                         socket_connect_timeout=config.timeout_s)
        await self._client.ping()

    async def fetch(self, ids: Sequence[str]) -> dict[str, str]:
        keys = [self.config.key_template.replace("{id}", doc_id) for doc_id in ids]
        field = self.config.field
        if field is None:
            values = await self._client.mget(keys)
        else:
            pipeline = self._client.pipeline(transaction=False)
            for key in keys:
                pipeline.hget(key, field)
            values = await pipeline.execute()
        return {doc_id: _text(value) for doc_id, value in zip(ids, values) if value is not None}

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value
