"""The resolving stage against a real HTTP document endpoint on 127.0.0.1: what one assembly round
hands over is one lookup, the cache spares lookups, the per-source limits hold (batch size,
concurrency, queue, timeout, breaker), every retrieval ends in exactly one decision, and what the
gate reserved for a retrieval that is not scored comes back to it."""
from __future__ import annotations

import asyncio
import gc
from typing import Any, AsyncIterator, Iterator

import pytest

from ctxprec.collector.components import Deadline
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision, Retrieval, RetrievedContext
from ctxprec.collector.resolving.config import ResolverConfig
from ctxprec.collector.resolving.stage import DocumentResolver
from ctxprec.collector.sampling.decide import RetrievalGate, score_throttle
from ctxprec.collector.sampling.sampler import Sampler
from tests.collector.rag_app import wait_until
from tests.resolving.stores_fixture import CORPUS, Decisions, DocumentEndpoint, Queue, ids_only

TEXT = {doc_id: text for doc_id, text, _ in CORPUS}


class Costs:
    def __init__(self) -> None:
        self.unspent_count = 0

    def settled(self, cost_usd: float) -> None:
        raise AssertionError("the resolver never scores")

    def unspent(self) -> None:
        self.unspent_count += 1


@pytest.fixture(autouse=True)
def collected() -> Iterator[None]:
    """Each test's garbage (closed sessions, finished tasks) collected at its end: finalizers run
    here, not inside whatever allocates next (CPython 3.11's AST builder fails when one runs
    in the middle of it)."""
    yield
    gc.collect()


@pytest.fixture
async def endpoint() -> AsyncIterator[DocumentEndpoint]:
    server = await DocumentEndpoint(CORPUS).start()
    try:
        yield server
    finally:
        await server.stop()


def resolver(url: str, queue: Queue, decisions: Decisions, **source: Any) -> tuple[DocumentResolver, Metrics, Costs]:
    settings = {k: source.pop(k) for k in ("queue_size", "cache_mb") if k in source}
    config = ResolverConfig.model_validate({"sources": [{"name": "kb", "kind": "http", "url": url,
                                                         "when": {"gen_ai.data_source.id": "kb"}, **source}],
                                            **settings})
    metrics = Metrics()
    stage = DocumentResolver(config, downstream=queue, decisions=decisions, metrics=metrics)
    costs = stage.costs = Costs()
    return stage, metrics, costs


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def settled(queue: Queue, decisions: Decisions, n: int) -> None:
    await wait_until(lambda: len(queue.items) + len(decisions.items) >= n, timeout=10, what=f"{n} retrievals decided")


async def test_one_round_is_one_lookup_and_documents_get_their_text_in_rank_order(endpoint: DocumentEndpoint) -> None:
    queue, decisions = Queue(), Decisions()
    stage, metrics, _ = resolver(endpoint.url, queue, decisions)
    await stage.start()  # the endpoint is asked for [] at start: it answers an object
    try:
        rounds = [["kb-01", "kb-02", "kb-04"], ["kb-03", "kb-08", "kb-04"], ["kb-07", "kb-03", "kb-05"]]
        for n, ids in enumerate(rounds):
            assert stage.try_submit(ids_only(ids, span=n))  # one round: no await between them
        await settled(queue, decisions, 3)
        assert endpoint.requests[1:] == [["kb-01", "kb-02", "kb-04", "kb-03", "kb-08", "kb-07", "kb-05"]]
        assert decisions.items == []
        for r, ids in zip(queue.items, rounds):
            assert r.documents_resolved and r.textless == []
            assert [c.content for c in r.contexts] == [TEXT[i] for i in ids]
            assert [(c.id, c.score, c.position) for c in r.contexts] == [(i, 1.0 - n / 10, n) for n, i in enumerate(ids)]
        # Asked again: answered from the cache, no lookup.
        assert stage.try_submit(ids_only(rounds[0], span=9))
        assert len(queue.items) == 4 and len(endpoint.requests) == 2
        assert sample(metrics, "ctxprec_resolver_ids_total", source="kb", outcome="cached") == 3
        assert sample(metrics, "ctxprec_resolver_ids_total", source="kb", outcome="found") == 7
        assert sample(metrics, "ctxprec_resolver_lookups_total", source="kb", outcome="ok") == 1
        assert sample(metrics, "ctxprec_resolver_lookup_seconds_count", source="kb") == 1
        assert sample(metrics, "ctxprec_resolver_cache_bytes") > sum(len(TEXT[i]) for i in TEXT if i != "kb-06")
    finally:
        await stage.close()


async def test_a_missing_id_decides_its_retrieval_unresolved_and_only_it(endpoint: DocumentEndpoint) -> None:
    queue, decisions = Queue(), Decisions()
    stage, metrics, costs = resolver(endpoint.url, queue, decisions)
    try:
        assert stage.try_submit(ids_only(["kb-01", "kb-99", "kb-02"], span=1))
        assert stage.try_submit(ids_only(["kb-01", "kb-02"], span=2))
        await settled(queue, decisions, 2)
        [unresolved] = decisions.items
        assert (unresolved.decision, unresolved.error[0]) == (Decision.UNRESOLVED, "missing")  # type: ignore[index]
        assert not unresolved.retrieval.contexts and not unresolved.retrieval.documents_resolved
        assert [r.span_id for r in queue.items] == [f"{3:016x}"]
        assert costs.unspent_count == 1
        assert sample(metrics, "ctxprec_resolver_unresolved_total", source="kb", reason="missing") == 1
        assert sample(metrics, "ctxprec_resolver_ids_total", source="kb", outcome="missing") == 1
    finally:
        await stage.close()


async def test_a_slow_source_times_out_and_a_failing_one_opens_its_breaker(endpoint: DocumentEndpoint) -> None:
    queue, decisions = Queue(), Decisions()
    stage, metrics, _ = resolver(endpoint.url, queue, decisions, timeout_s=0.2, breaker_threshold=2,
                                 breaker_cooldown_s=60)
    try:
        endpoint.delay_s = 1.0
        assert stage.try_submit(ids_only(["kb-01"], span=1))
        await settled(queue, decisions, 1)
        assert decisions.items[-1].error[0] == "timeout"  # type: ignore[index]
        endpoint.delay_s, endpoint.status = 0.0, 500
        assert stage.try_submit(ids_only(["kb-02"], span=2))
        await settled(queue, decisions, 2)
        assert decisions.items[-1].error[0] == "error"  # type: ignore[index]
        asked = len(endpoint.requests)
        endpoint.status = 200
        assert stage.try_submit(ids_only(["kb-03"], span=3))  # two failures in a row: the breaker is open
        await settled(queue, decisions, 3)
        assert len(endpoint.requests) == asked and queue.items == []
        assert [o.error[0] for o in decisions.items] == ["timeout", "error", "error"]  # type: ignore[index]
        assert sample(metrics, "ctxprec_resolver_lookups_total", source="kb", outcome="breaker_open") == 1
        assert sample(metrics, "ctxprec_resolver_source_up", source="kb") == 0
        assert sample(metrics, "ctxprec_resolver_unresolved_total", source="kb", reason="timeout") == 1
        assert sample(metrics, "ctxprec_resolver_unresolved_total", source="kb", reason="error") == 2
    finally:
        await stage.close()


async def test_batches_keep_to_max_batch_and_lookups_to_max_concurrency(endpoint: DocumentEndpoint) -> None:
    queue, decisions = Queue(), Decisions()
    stage, _, _ = resolver(endpoint.url, queue, decisions, max_batch=3, max_concurrency=1)
    endpoint.delay_s = 0.05
    try:
        for n, ids in enumerate([["kb-01", "kb-02"], ["kb-03", "kb-04"], ["kb-05", "kb-06"], ["kb-07"]]):
            assert stage.try_submit(ids_only(ids, span=n * 2))
        await settled(queue, decisions, 4)
        # Whole retrievals, at most 3 ids a lookup (after the [] that checks the endpoint as it opens).
        assert endpoint.requests == [[], ["kb-01", "kb-02"], ["kb-03", "kb-04"], ["kb-05", "kb-06", "kb-07"]]
        assert endpoint.most_in_flight == 1 and decisions.items == []
    finally:
        await stage.close()


async def test_a_full_queue_sheds_and_shutdown_decides_what_waits_failed(endpoint: DocumentEndpoint) -> None:
    queue, decisions = Queue(), Decisions()
    stage, _, costs = resolver(endpoint.url, queue, decisions, queue_size=2)
    endpoint.delay_s = 1.0  # longer than the shutdown deadline below
    assert stage.try_submit(ids_only(["kb-01"], span=1)) and stage.try_submit(ids_only(["kb-02"], span=3))
    assert not stage.try_submit(ids_only(["kb-03"], span=5))  # the gate decides it `overloaded`
    with_text = Retrieval(trace_id="1" * 32, span_id="2" * 16, service="app", query="q",
                          contexts=[RetrievedContext("text")])
    assert stage.try_submit(with_text)  # text needs no lookup: straight on, untouched
    await asyncio.sleep(0.1)
    await stage.finish(Deadline.after(0.2))
    await stage.close()
    assert [o.decision for o in decisions.items] == [Decision.FAILED, Decision.FAILED]
    assert all(o.cut_short for o in decisions.items)  # their input stays unacknowledged
    assert queue.items == [with_text] and costs.unspent_count == 2
    assert not stage.try_submit(ids_only(["kb-04"], span=9))  # finished: takes no more


async def test_a_retrieval_resolved_into_a_full_scoring_queue_is_overloaded(endpoint: DocumentEndpoint) -> None:
    queue, decisions = Queue(room=0), Decisions()
    stage, _, costs = resolver(endpoint.url, queue, decisions)
    try:
        assert stage.try_submit(ids_only(["kb-01"], span=1))
        await settled(queue, decisions, 1)
        assert [o.decision for o in decisions.items] == [Decision.OVERLOADED] and costs.unspent_count == 1
        assert not stage.try_submit(ids_only(["kb-01"], span=3))  # from the cache: the queue says no at once
    finally:
        await stage.close()


async def test_the_gate_sends_on_only_what_a_source_can_resolve_and_gets_back_what_was_not_spent(
        endpoint: DocumentEndpoint) -> None:
    queue, decisions = Queue(), Decisions()
    stage, _, _ = resolver(endpoint.url, queue, decisions)
    throttle = score_throttle(6.0)  # one a minute after a burst of one
    gate = RetrievalGate(sampler=Sampler(1.0), queue=stage, decisions=decisions, throttle=throttle,
                         resolvable=stage.resolvable)
    stage.costs = gate
    try:
        gate.submit(ids_only(["kb-01", None], span=1))  # a document without an id: nothing to look up
        gate.submit(ids_only(["kb-01"], span=3, attributes={"gen_ai.data_source.id": "other"}))  # no source's `when`
        assert [o.decision for o in decisions.items] == [Decision.NO_CONTENT, Decision.NO_CONTENT]
        gate.submit(ids_only(["kb-99"], span=5))  # takes the one throttle token, then is unresolved
        await settled(queue, decisions, 3)
        assert decisions.items[-1].decision is Decision.UNRESOLVED
        gate.submit(ids_only(["kb-02"], span=7))  # the token came back: not throttled
        await settled(queue, decisions, 4)
        assert [r.span_id for r in queue.items] == [f"{8:016x}"]
    finally:
        await stage.close()
