"""A Chroma server, through chromadb's HTTP client: a batch is one `get` of the collection by ids,
documents only. At start: the server answers and the collection exists. Chroma's product
telemetry is switched off; nothing is embedded, so no embedding model is ever loaded."""
from __future__ import annotations

from typing import Any, Sequence
from urllib.parse import urlsplit

import chromadb
from chromadb.config import Settings
from chromadb.errors import NotFoundError

from ctxprec.collector.resolving.config import ChromaSource
from ctxprec.collector.resolving.stores import StoreError


class ChromaStore:
    def __init__(self, config: ChromaSource, secret: str | None) -> None:
        self.config = config
        self._secret = secret
        self._client: Any = None
        self._collection: Any = None

    async def open(self) -> None:
        config = self.config
        parts = urlsplit(config.url)
        https = parts.scheme == "https"
        headers = {"Authorization": f"Bearer {self._secret}"} if self._secret else None
        self._client = await chromadb.AsyncHttpClient(
            host=parts.hostname or "", port=parts.port or (443 if https else 8000), ssl=https, headers=headers,
            settings=Settings(anonymized_telemetry=False), tenant=config.tenant, database=config.database)
        try:
            self._collection = await self._client.get_collection(config.collection, embedding_function=None)
        except NotFoundError:
            raise StoreError(f"the collection {config.collection!r} does not exist") from None

    async def fetch(self, ids: Sequence[str]) -> dict[str, str]:
        found = await self._collection.get(ids=list(ids), include=["documents"])
        return {str(i): text for i, text in zip(found["ids"], found["documents"] or []) if isinstance(text, str)}

    async def close(self) -> None:
        # chromadb's async client has no close of its own: its server connection pool is
        # released by the API object's cleanup.
        server = getattr(self._client, "_server", None)
        cleanup = getattr(server, "_cleanup", None)
        if cleanup is not None:
            await cleanup()
        self._client = self._collection = None
