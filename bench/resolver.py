"""What resolving a sampled retrieval's documents costs, per real store: PostgreSQL, Redis, Chroma
and Milvus Lite servers started on 127.0.0.1 (as the resolver tests start them), each holding the
same corpus of 2,000 documents of about 600 characters.

For each store, the resolving stage (collector/resolving/, the http kind excepted) is handed
retrievals of 10 document ids, one at a time, and the time from its `try_submit` to the
retrieval reaching the scoring queue with its texts is measured:

- cold: ids never looked up before (each retrieval's 10 ids fresh: one lookup of 10 ids);
- cached: the same retrievals again (every id answered from the cache, no lookup);
- round: 20 retrievals handed over in one turn (one assembly round), one lookup of their 200
  ids; the time until the last of them is queued, per retrieval.

    .venv/bin/python -m bench.resolver            # 200 retrievals per store -> bench/results/resolver.json
    .venv/bin/python -m bench.resolver --quick    # 20

Needs what `make test` installs: the stores' environment (.venv-stores), PostgreSQL's initdb,
redis-server, and the resolve-* extras.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine, write_result
from ctxprec.collector.model import Outcome, Retrieval, RetrievedContext
from ctxprec.collector.resolving.config import ResolverConfig
from ctxprec.collector.resolving.stage import DocumentResolver
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

IDS_PER_RETRIEVAL = 10
ROUND = 20
WORDS = ("battery charger frame warranty motor torque display reset service centre range eco mode size rider "
         "aluminium weight hours kilometres assist speed").split()


def corpus(n: int, seed: int = 7) -> list[Document]:
    rng = random.Random(seed)
    return [(f"doc-{i:05d}", " ".join(rng.choice(WORDS) for _ in range(90)), [rng.random() for _ in range(8)])
            for i in range(n)]


class Arrivals:
    """The scoring queue: notes when each retrieval arrives with its texts."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.event = asyncio.Event()

    def try_submit(self, retrieval: Retrieval) -> bool:
        assert retrieval.documents_resolved and all(c.content for c in retrieval.contexts)
        self.at[retrieval.span_id] = time.perf_counter()
        self.event.set()
        return True


class Refusals:
    def emit(self, outcome: Outcome) -> None:
        raise AssertionError(f"{outcome.decision.value}: {outcome.error}")

    def count(self, *_: Any) -> None:
        raise AssertionError("no bulk decision expected")


def retrieval(n: int, ids: list[str]) -> Retrieval:
    return Retrieval(trace_id=f"{n:032x}", span_id=f"{n:016x}", service="bench", query="q", contexts=[],
                     attributes={"gen_ai.data_source.id": "kb"}, documents_without_text=len(ids),
                     textless=[RetrievedContext("", doc_id, position=i) for i, doc_id in enumerate(ids)])


async def one_at_a_time(stage: DocumentResolver, arrivals: Arrivals, batches: list[list[str]], first: int) -> list[float]:
    times = []
    for k, ids in enumerate(batches):
        r = retrieval(first + k, ids)
        arrivals.event.clear()
        started = time.perf_counter()
        assert stage.try_submit(r)
        while r.span_id not in arrivals.at:
            await arrivals.event.wait()
            arrivals.event.clear()
        times.append((arrivals.at[r.span_id] - started) * 1000)
    return times


async def rounds(stage: DocumentResolver, arrivals: Arrivals, batches: list[list[str]], first: int) -> list[float]:
    per_retrieval = []
    for start in range(0, len(batches) - ROUND + 1, ROUND):
        group = [retrieval(first + start + k, ids) for k, ids in enumerate(batches[start:start + ROUND])]
        began = time.perf_counter()
        for r in group:
            assert stage.try_submit(r)
        while not all(r.span_id in arrivals.at for r in group):
            arrivals.event.clear()
            await arrivals.event.wait()
        per_retrieval.append((max(arrivals.at[r.span_id] for r in group) - began) * 1000 / ROUND)
    return per_retrieval


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"p50_ms": round(statistics.median(ordered), 3),
            "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
            "mean_ms": round(statistics.fmean(ordered), 3), "n": len(ordered)}


async def measure(source: dict[str, Any], documents: list[Document], retrievals: int) -> dict[str, Any]:
    ids = [doc_id for doc_id, _, _ in documents]
    random.Random(11).shuffle(ids)
    batches = [ids[i * IDS_PER_RETRIEVAL:(i + 1) * IDS_PER_RETRIEVAL] for i in range(retrievals)]
    round_batches = [ids[(retrievals + i) * IDS_PER_RETRIEVAL:(retrievals + i + 1) * IDS_PER_RETRIEVAL]
                     for i in range(min(retrievals, (len(ids) // IDS_PER_RETRIEVAL) - retrievals))]
    arrivals = Arrivals()
    config = ResolverConfig.model_validate({"sources": [{**source, "when": {"gen_ai.data_source.id": "kb"}}]})
    stage = DocumentResolver(config, downstream=arrivals, decisions=Refusals())
    await stage.start()
    try:
        await one_at_a_time(stage, arrivals, [ids[-IDS_PER_RETRIEVAL:]], 10**6)  # connections made, code warm
        cold = await one_at_a_time(stage, arrivals, batches, 0)
        cached = await one_at_a_time(stage, arrivals, batches, retrievals)
        batched = await rounds(stage, arrivals, round_batches, 2 * retrievals)
        lookups = stage.sources[0].lookups
    finally:
        await stage.close()
    return {"cold": summary(cold), "cached": summary(cached), "round_of_20_per_retrieval": summary(batched),
            "lookups": lookups}


async def run(retrievals: int, documents: int) -> dict[str, Any]:
    docs = corpus(documents)
    root = Path(tempfile.mkdtemp(prefix="ctxprec-bench-resolver-"))
    postgres, redis = PostgresServer(), RedisServer(root / "redis.log")
    chroma, milvus = ChromaServer(root / "chroma"), MilvusLiteServer(root / "milvus")
    results: dict[str, Any] = {}
    try:
        for server in (postgres, redis, chroma, milvus):
            server.start()
        await seed_postgres(postgres, docs, password="bench")
        seed_redis(redis.url, docs)
        seed_chroma(chroma, "bench-docs", docs)
        seed_milvus(milvus, "bench_docs", docs)
        os.environ["BENCH_PG_PASSWORD"] = "bench"
        sources = {
            "postgres": {"name": "pg", "kind": "postgres", "dsn": postgres.dsn("reader"),
                         "password_env": "BENCH_PG_PASSWORD", "query": "SELECT id, content FROM documents WHERE id = ANY($1)"},
            "redis": {"name": "redis", "kind": "redis", "url": redis.url, "key_template": "doc:{id}"},
            "chroma": {"name": "chroma", "kind": "chroma", "url": chroma.url, "collection": "bench-docs"},
            "milvus": {"name": "milvus", "kind": "milvus", "uri": milvus.uri, "collection": "bench_docs",
                       "text_field": "text"},
        }
        for kind, source in sources.items():
            results[kind] = await measure(source, docs, retrievals)
            cold, cached = results[kind]["cold"], results[kind]["cached"]
            print(f"{kind:9s} cold p50 {cold['p50_ms']:.2f} ms p95 {cold['p95_ms']:.2f} ms | cached p50 "
                  f"{cached['p50_ms']:.3f} ms p95 {cached['p95_ms']:.3f} ms | round of 20: "
                  f"{results[kind]['round_of_20_per_retrieval']['p50_ms']:.2f} ms per retrieval")
    finally:
        postgres.remove()
        for server in (redis, chroma, milvus):
            server.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20 retrievals per store")
    parser.add_argument("--retrievals", type=int, default=200)
    parser.add_argument("--documents", type=int, default=2000)
    args = parser.parse_args(argv)
    retrievals = 20 if args.quick else args.retrievals
    stores = asyncio.run(run(retrievals, max(args.documents, (2 * retrievals + ROUND) * IDS_PER_RETRIEVAL + 10)))
    report = {
        "description": "Resolution cost per sampled retrieval of 10 ids, against real stores on 127.0.0.1: cold (a "
                       "lookup of 10 fresh ids), cached (every id from the cache), and per retrieval when 20 are "
                       "handed over in one round (one lookup of 200 ids); milliseconds from the resolver's "
                       "try_submit to the scoring queue.",
        "machine": machine(),
        "ids_per_retrieval": IDS_PER_RETRIEVAL,
        "stores": stores,
        "worst_cold_p95_ms": max(s["cold"]["p95_ms"] for s in stores.values()),
        "worst_cached_p95_ms": max(s["cached"]["p95_ms"] for s in stores.values()),
    }
    print(write_result("resolver", report, quick=args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
