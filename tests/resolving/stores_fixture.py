"""The four real stores of the resolver tests, started once per test module on 127.0.0.1 and each
holding the real-traffic apps' corpus (tests/realtraffic/apps/corpus.py): PostgreSQL (table
`documents`, read by `reader` with a password), Redis (`doc:{id}` strings and `kb:{id}` hashes),
Chroma (collection `kb-docs`) and Milvus Lite (collection `kb_store`); plus the app's own HTTP
endpoint (POST a JSON list of ids, answered with id -> text), a small aiohttp server."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import yaml
from aiohttp import web

from ctxprec.collector import config as config_module
from ctxprec.collector.model import Outcome, Retrieval, RetrievedContext
from tests.collector.rag_app import serve_config
from tests.helpers.redis_server import RedisServer
from tests.helpers.stores import (
    ChromaServer,
    Document,
    MilvusLiteServer,
    PostgresServer,
    seed_chroma,
    seed_milvus,
    seed_postgres,
    seed_redis,
)
from tests.realtraffic.apps.corpus import DOCS, embed_text

CORPUS: list[Document] = [(d.doc_id, d.text, embed_text(d.text)) for d in DOCS]
PASSWORD_ENV = "KB_STORE_PASSWORD"
READER_PASSWORD = "reader-secret"
DATA_SOURCE = {"gen_ai.data_source.id": "kb"}  # what the GenAI utility app's retrieval spans say
KINDS = ("postgres", "redis", "redis-hash", "chroma", "milvus", "http")


@dataclass
class Stores:
    postgres: PostgresServer
    redis: RedisServer
    chroma: ChromaServer
    milvus: MilvusLiteServer
    http_url: str = ""

    def source(self, kind: str, **overrides: Any) -> dict[str, Any]:
        """A `resolver.sources` entry for `kind`, as a user writes it."""
        base: dict[str, Any] = {"name": f"kb-{kind}", "when": DATA_SOURCE}
        if kind == "postgres":
            base.update(kind="postgres", dsn=self.postgres.dsn("reader"), password_env=PASSWORD_ENV,
                        query="SELECT id, content FROM documents WHERE id = ANY($1)")
        elif kind == "redis":
            base.update(kind="redis", url=self.redis.url, key_template="doc:{id}")
        elif kind == "redis-hash":
            base.update(kind="redis", url=self.redis.url, key_template="kb:{id}", field="text")
        elif kind == "chroma":
            base.update(kind="chroma", url=self.chroma.url, collection="kb-docs")
        elif kind == "milvus":
            base.update(kind="milvus", uri=self.milvus.uri, collection="kb_store", text_field="text")
        elif kind == "http":
            base.update(kind="http", url=self.http_url)
        base.update(overrides)
        return base

    def stop(self) -> None:
        for server in (self.milvus, self.chroma, self.redis):
            server.stop()
        self.postgres.remove()


def start_stores(root: Path) -> Stores:
    stores = Stores(PostgresServer(), RedisServer(root / "redis.log"), ChromaServer(root / "chroma"),
                    MilvusLiteServer(root / "milvus"))
    try:
        for server in (stores.postgres, stores.redis, stores.chroma, stores.milvus):
            server.start()
        asyncio.run(seed_postgres(stores.postgres, CORPUS, password=READER_PASSWORD))
        seed_redis(stores.redis.url, CORPUS)
        seed_chroma(stores.chroma, "kb-docs", CORPUS)
        seed_milvus(stores.milvus, "kb_store", CORPUS)
    except BaseException:
        stores.stop()
        raise
    return stores


class DocumentEndpoint:
    """The app's own endpoint: POST a JSON list of ids, answered with the texts it holds."""

    def __init__(self, documents: list[Document]) -> None:
        self.texts = {doc_id: text for doc_id, text, _ in documents}
        self.requests: list[list[str]] = []
        self.delay_s = 0.0
        self.status = 200
        self.in_flight = self.most_in_flight = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _documents(self, request: web.Request) -> web.Response:
        ids = await request.json()
        self.requests.append(ids)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        if self.status != 200:
            return web.Response(status=self.status, text="down")
        return web.json_response({i: self.texts[i] for i in ids if i in self.texts})

    async def start(self) -> "DocumentEndpoint":
        app = web.Application()
        app.router.add_post("/documents", self._documents)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/documents"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class Queue:
    """The scoring queue a resolver hands resolved retrievals to (full past `room`)."""

    def __init__(self, room: int = 1000) -> None:
        self.items: list[Retrieval] = []
        self.room = room

    def try_submit(self, retrieval: Retrieval) -> bool:
        if len(self.items) >= self.room:
            return False
        self.items.append(retrieval)
        return True


class Decisions:
    """Where a resolver's decisions go (the result fan-out's `Decisions` seam)."""

    def __init__(self) -> None:
        self.items: list[Outcome] = []

    def emit(self, outcome: Outcome) -> None:
        self.items.append(outcome)

    def count(self, *_: Any) -> None:
        raise AssertionError("no bulk decision expected")


def ids_only(ids: list[str | None], *, span: int = 0, attributes: dict[str, Any] | None = None) -> Retrieval:
    """A retrieval as assembly reads one whose documents carry ids and no text."""
    return Retrieval(trace_id=f"{span:032x}", span_id=f"{span + 1:016x}", service="app", query="q", contexts=[],
                     attributes=dict(DATA_SOURCE) if attributes is None else attributes,
                     documents_without_text=len(ids),
                     textless=[RetrievedContext("", doc_id, score=1.0 - i / 10, position=i) for i, doc_id in enumerate(ids)])


def resolver_config(tmp_path: Path, sources: list[dict[str, Any]], *flags: str,
                    mappings: list[dict[str, Any]] | None = None, **resolver: Any) -> config_module.ServeConfig:
    """`ctxprec serve`'s config with a YAML file holding the `resolver` section (and mappings)."""
    document: dict[str, Any] = {"resolver": {"sources": sources, **resolver}}
    if mappings:
        document["conventions"] = {"mappings": mappings}
    path = tmp_path / f"resolver-{len(list(tmp_path.glob('resolver-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return serve_config("--config", str(path), *flags)


def outcome_verdicts(record: dict[str, Any]) -> list[tuple[int, bool, str]]:
    """A record's verdicts without the document key (ids in the sidecar, hashes in the batch)."""
    return [(v["index"], v["relevant"], v["reason"]) for v in record["verdicts"]]


def dumped(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


async def endpoint(documents: list[Document]) -> AsyncIterator[DocumentEndpoint]:
    server = await DocumentEndpoint(documents).start()
    try:
        yield server
    finally:
        await server.stop()
