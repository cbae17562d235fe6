"""Cluster learning on a real broker: two replicas in one consumer group, each scoring the
partition it owns, both learn from every score. Each replica's drift detector counts every score
of the service exactly once (its own directly, the other's read back from the results topic),
both /diagnostics/documents bodies are the same, only one replica publishes the Kafka diagnostics
topic, and records that cannot be read, or a feed that fell behind, are counted and never stall
scoring."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from ctxprec.collector.pipeline import Pipeline

from tests.kafka.inprocess import kafka_flags, running
from tests.kafka.tansu import Broker, create_topic, produce, read_all

pytestmark = pytest.mark.slow

EVENTS = 120
SERVICE = "kb-bot"


def _event(i: int) -> tuple[bytes, bytes]:
    trace = f"{i + 1:032x}"
    noisy = "promo-banner" if i % 3 else "cookie-notice"
    contexts = [{"id": f"kb-{i % 7}", "content": f"[relevant] passage {i % 7}"},
                {"id": noisy, "content": f"[irrelevant] {noisy} text"},
                {"id": f"kb-{i % 5}-b", "content": f"[{'relevant' if i % 2 else 'irrelevant'}] more {i % 5}"}]
    event = {"trace_id": trace, "span_id": trace[:16], "service": SERVICE, "query": f"question {i}",
             "contexts": contexts, "output": f"answer {i}",
             "attributes": {"retriever": "kb-v2", "index.version": f"v{i % 2}"}}
    return trace.encode(), json.dumps(event).encode()


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _evaluated(p: Pipeline) -> int:
    return p.fanout.counts.get("evaluated", 0)


def _count(p: Pipeline, outcome: str) -> float:
    return p.metrics.cluster_records.labels(outcome=outcome)._value.get()


def _documents(p: Pipeline) -> list[tuple[Any, ...]]:
    assert p.diagnostics is not None
    body = p.diagnostics.documents_json({"limit": "50"}).body
    # `relevant` and `retrieved` count from when a document took its slot, which depends on the
    # order the verdicts came in; the irrelevant counts (what ranks the noisy documents) do not.
    return sorted((s["service"], s["retriever"], d["document"], d["irrelevant"], d["error"])
                  for s in body["summaries"] for d in s["documents"])


async def _two_replicas(broker: Broker, topic: str, results: str, judge_url: str, tmp_path: Path,
                        extra: list[str]) -> tuple[list[str], list[str]]:
    config = tmp_path / "ctxprec.yaml"
    config.write_text("drift:\n  warmup: 20\n")
    flags = kafka_flags(broker.bootstrap, topic, results, judge_url, fmt="rag_event", group=f"g-{topic}",
                        extra=["--config", str(config), "--diagnostics-slice-attributes", "index.version",
                               "--kafka-session-timeout-ms", "3000", "--kafka-heartbeat-interval-ms", "500", *extra])
    return flags, flags


async def _settled(a: Pipeline, b: Pipeline) -> None:
    assert a.kafka_receiver is not None and b.kafka_receiver is not None
    assert a.cluster_feed is not None and b.cluster_feed is not None
    await _until(lambda: len(a.kafka_receiver.assignment) == 1 and len(b.kafka_receiver.assignment) == 1
                 and a.cluster_feed.assigned and b.cluster_feed.assigned, "the group and both feeds to settle")


async def test_two_replicas_learn_from_every_score_once(broker: Broker, unique_topic: str, stub_judge,
                                                       tmp_path: Path) -> None:
    topic, results, diagnostics = unique_topic, unique_topic + ".scores", unique_topic + ".diagnostics"
    await create_topic(broker.bootstrap, topic, 2)
    for t in (results, diagnostics, topic + ".dlq"):
        await create_topic(broker.bootstrap, t, 1)
    flags, _ = await _two_replicas(broker, topic, results, stub_judge.url, tmp_path,
                                   ["--kafka-diagnostics-topic", diagnostics, "--kafka-diagnostics-interval-s", "600"])
    async with running(flags) as a, running(flags) as b:
        await _settled(a, b)
        assert a.replica and b.replica and a.replica != b.replica
        # A record that is no score record, and one from a producer that is no ctxprec: counted, skipped.
        await produce(broker.bootstrap, results, [(b"x", b"not json")], headers=[("ctxprec.replica", b"someone")])
        await produce(broker.bootstrap, results, [(b"y", b'{"decision": "evaluated"}')])
        await produce(broker.bootstrap, topic, [_event(i) for i in range(EVENTS)])
        await _until(lambda: _evaluated(a) + _evaluated(b) == EVENTS, "every event scored")
        assert _evaluated(a) > 0 and _evaluated(b) > 0, "one replica scored everything: nothing to learn across"
        await _until(lambda: a.cluster_feed.applied == _evaluated(b) and b.cluster_feed.applied == _evaluated(a),
                     "each replica to read the other's records")
        await asyncio.sleep(0.5)  # anything counted twice would show by now
        for me, other in ((a, b), (b, a)):
            detector = me.drift.detectors[SERVICE]
            assert detector.count == EVENTS  # every score of the service, each once
            assert me.cluster_feed.applied == _evaluated(other)
            assert _count(me, "own") == _evaluated(me)
            assert _count(me, "malformed") == 2
            assert _count(me, "duplicate") == 0
        # The same summaries on both: the noisy documents, the top-k counts, the slices.
        assert _documents(a) == _documents(b)
        assert max(_documents(a), key=lambda d: d[3])[2] in ("promo-banner", "cookie-notice")
        top_k = [p.diagnostics.top_k_json({}).body for p in (a, b)]
        assert top_k[0]["pairs"] == top_k[1]["pairs"] and top_k[0]["pairs"]
        # The drift slices saw every score, with the slice values carried beside the other's records
        # (decayed sums depend on the order scores came in, so only the counts are the same).
        for p in (a, b):
            snapshot = p.diagnostics.slices.snapshot(SERVICE)
            assert snapshot is not None and snapshot.scores == EVENTS
            assert {s.value for s in snapshot.attributes["index.version"]} >= {"v0", "v1"}
        owners = [p for p in (a, b) if any(tp.partition == 0 for tp in p.kafka_receiver.assignment)]
        assert len(owners) == 1
        publisher = owners[0]
    # One replica wrote the last round for the cluster; the other skipped it.
    assert publisher.kafka_diagnostics.rounds == 1
    assert (a if publisher is b else b).kafka_diagnostics.rounds == 0
    summaries = [json.loads(r.value) for r in await read_all(broker.bootstrap, diagnostics, expect=10, timeout_s=3)]
    # Each event has one noisy context and, every other event, a second irrelevant one.
    assert len(summaries) == 1 and summaries[0]["irrelevant_verdicts"] == EVENTS + EVENTS // 2


async def test_a_feed_that_falls_behind_skips_ahead_and_scoring_goes_on(broker: Broker, unique_topic: str,
                                                                        stub_judge, tmp_path: Path) -> None:
    topic, results = unique_topic, unique_topic + ".scores"
    await create_topic(broker.bootstrap, topic, 2)
    for t in (results, topic + ".dlq"):
        await create_topic(broker.bootstrap, t, 1)
    max_lag = 50
    flags, _ = await _two_replicas(broker, topic, results, stub_judge.url, tmp_path,
                                   ["--cluster-max-lag-records", str(max_lag)])
    async with running(flags) as a, running(flags) as b:
        await _settled(a, b)
        flood = [(None, b"\x00garbage" * 20) for _ in range(3000)]
        events = [_event(i) for i in range(EVENTS)]
        # The flood first: scoring must not wait behind it, and the feeds skip most of it. It lands
        # in one batch, so each feed's next fetch finds it far more than `max_lag` records behind (in a
        # trickle of small batches, a quick feed keeps up and has nothing to skip).
        await asyncio.gather(produce(broker.bootstrap, results, flood, linger_ms=1000, max_batch_size=1024 * 1024),
                             produce(broker.bootstrap, topic, events))
        await _until(lambda: _evaluated(a) + _evaluated(b) == EVENTS, "every event scored")
        await _until(lambda: all(_count(p, "malformed") + _count(p, "skipped") >= len(flood) for p in (a, b)),
                     "the flood to be read or skipped")
        for p in (a, b):
            assert _count(p, "skipped") > 0
            assert p.fanout.counts.get("failed", 0) == 0


async def test_learning_is_off_without_a_results_topic(broker: Broker, unique_topic: str, stub_judge) -> None:
    await create_topic(broker.bootstrap, unique_topic, 1)
    flags = kafka_flags(broker.bootstrap, unique_topic, "", stub_judge.url, fmt="rag_event", group="g-off")
    flags = [f for i, f in enumerate(flags) if f != "--kafka-results-topic" and flags[i - 1] != "--kafka-results-topic"]
    async with running(flags) as p:
        assert p.cluster_feed is None and p.replica is None
