"""What a store of documents offers the resolver, whatever its kind: `open` (connect, and check at
start that it can answer: the query returns two columns, the collection and its text field
exist), `fetch` (the texts of a batch of ids, in one round trip: ids it does not hold are left
out) and `close`. One module per kind (postgres_store.py, redis_store.py, chroma_store.py,
milvus_store.py, http_store.py), each importing its client library only when built, so the
default install needs none of them (extras `ctxprec[resolve-postgres]`, ...).

A store's failures are `StoreError`s whose message is safe to log: `scrubbed` takes the source's
address (DSN, URL) and secret out of whatever a client library put in its exception."""
from __future__ import annotations

from typing import Protocol, Sequence
from urllib.parse import urlsplit

from ctxprec.collector.resolving.config import SourceConfig

class StoreError(Exception):
    """A store that cannot answer, or answers what the resolver cannot use; the message names no
    address and no secret."""


class Store(Protocol):
    async def open(self) -> None: ...

    async def fetch(self, ids: Sequence[str]) -> dict[str, str]: ...

    async def close(self) -> None: ...


def scrubbed(message: str, config: SourceConfig, secret: str | None) -> str:
    """`message` without the source's address, its host part or its secret."""
    address = config.address
    hidden = [address, secret or ""]
    try:
        parts = urlsplit(address)
        hidden += [parts.netloc, parts.hostname or ""]
    except ValueError:
        pass
    for text in sorted((h for h in hidden if h and len(h) > 2), key=len, reverse=True):
        message = message.replace(text, "…")
    return message
