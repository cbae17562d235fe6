"""Milvus (or Milvus Lite), through pymilvus's asyncio client: a batch is one `get` of the
collection by primary key, the text field only. At start: the collection exists, has the text
field, and its primary key's type says whether ids are numbers (an id that is not one cannot be
in such a collection)."""
from __future__ import annotations

from typing import Any, Sequence

from pymilvus import AsyncMilvusClient, DataType
from pymilvus.exceptions import MilvusException

from ctxprec.collector.resolving.config import MilvusSource
from ctxprec.collector.resolving.stores import StoreError


class MilvusStore:
    def __init__(self, config: MilvusSource, secret: str | None) -> None:
        self.config = config
        self._secret = secret
        self._client: Any = None
        self._key = ""
        self._integers = False

    async def open(self) -> None:
        config = self.config
        self._client = AsyncMilvusClient(uri=config.uri, token=self._secret or "", db_name=config.db_name,
                                         timeout=config.timeout_s)
        try:
            description = await self._client.describe_collection(config.collection)
        except MilvusException as exc:
            raise StoreError(f"the collection {config.collection!r} cannot be described: {exc.message}") from None
        fields = {f["name"]: f for f in description.get("fields", [])}
        if config.text_field not in fields:
            raise StoreError(f"the collection {config.collection!r} has no field {config.text_field!r} "
                             f"(its fields: {', '.join(sorted(fields))})")
        key = next((f for f in fields.values() if f.get("is_primary")), None)
        if key is None:
            raise StoreError(f"the collection {config.collection!r} has no primary key")
        self._key = key["name"]
        self._integers = key["type"] == DataType.INT64

    async def fetch(self, ids: Sequence[str]) -> dict[str, str]:
        keys: list[Any] = [int(i) for i in ids if i.lstrip("-").isdigit()] if self._integers else list(ids)
        if not keys:
            return {}
        rows = await self._client.get(self.config.collection, ids=keys, output_fields=[self.config.text_field])
        return {str(row[self._key]): row[self.config.text_field] for row in rows
                if isinstance(row.get(self.config.text_field), str)}

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
