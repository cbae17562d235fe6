"""What the cluster feed learns from a score record read back from Kafka: the headers the results
exporter writes round-trip, a record of this scorer becomes a PeerScore, anything else is refused
with the outcome it is counted under; `--cluster-learning on` without Kafka is refused at start."""
from __future__ import annotations

import json
from typing import Any

import pytest

from ctxprec.collector.cluster.records import Malformed, NotEvaluated, OtherScorer, peer_score
from ctxprec.collector.kafka.score_headers import REPLICA, ReadHeaders, read_headers, score_headers
from ctxprec.collector.pipeline import Pipeline

from tests.kafka.inprocess import load_config

MODEL, PROMPT = "openai/stub", "v3"


def _record(**changes: Any) -> bytes:
    record = {"id": "r1", "trace_id": "t", "span_id": "s", "service": "shop", "retriever": "dense",
              "score": 0.42, "scale": 0.5, "reason": "...",
              "verdicts": [{"index": 0, "relevant": True, "reason": "a", "document": "kb-1"},
                           {"index": 1, "relevant": False, "reason": "b", "document": "promo"}],
              "judge": {"model": MODEL, "prompt_version": PROMPT, "calls": 1}, "decision": "evaluated"}
    record.update(changes)
    return json.dumps(record).encode()


def test_headers_round_trip_and_say_who_made_the_record() -> None:
    headers = score_headers("r1", "pod-a-1-abc", [120, 80], {"index.version": "v2", "tenant.tier": 3})
    assert (REPLICA, b"pod-a-1-abc") in headers and REPLICA == "ctxprec.replica"  # the name docs/KAFKA.md gives
    read = read_headers(headers)
    assert read == ReadHeaders(replica="pod-a-1-abc", context_chars=[120, 80],
                               slices={"index.version": "v2", "tenant.tier": 3})
    # Without cluster learning a record carries its id alone, as before.
    assert score_headers("r1", None, [1], {"a": 1}) == [("ctxprec.record_id", b"r1")]
    with pytest.raises(ValueError):
        read_headers([("ctxprec.context_chars", b"12,x")])


def test_a_record_of_this_scorer_becomes_a_peer_score() -> None:
    score = peer_score(_record(), read_headers(score_headers("r1", "b", [120, 80], {"v": "2"})),
                       model=MODEL, prompt_version=PROMPT)
    assert (score.service, score.retriever, score.score) == ("shop", "dense", pytest.approx(0.84))
    assert [(v.index, v.relevant) for v in score.verdicts] == [(0, True), (1, False)]
    assert score.documents == ["kb-1", "promo"] and score.context_chars == [120, 80] and score.slices == {"v": "2"}
    # Sizes that do not match the verdicts are not trusted.
    assert peer_score(_record(), ReadHeaders(context_chars=[1]), model=MODEL, prompt_version=PROMPT).context_chars == []


@pytest.mark.parametrize("value, refused", [
    (b"not json", Malformed), (b"[1]", Malformed), (_record(decision="failed", score=None), NotEvaluated),
    (_record(decision="no_contexts"), Malformed), (_record(judge={"model": "openai/other", "prompt_version": PROMPT}),
                                                   OtherScorer),
    (_record(judge={"model": MODEL, "prompt_version": "v2"}), OtherScorer), (_record(score="high"), Malformed),
    (_record(scale=0), Malformed), (_record(service=None), Malformed),
    (_record(verdicts=[{"index": 0, "relevant": True, "reason": "a"}]), Malformed),
    (_record(verdicts=[{"index": 1, "relevant": True, "reason": "a", "document": "d"}]), Malformed),
])
def test_anything_else_is_refused_with_its_reason(value: bytes, refused: type[Exception]) -> None:
    with pytest.raises(refused):
        peer_score(value, ReadHeaders(), model=MODEL, prompt_version=PROMPT)


def test_learning_on_needs_kafka_and_a_results_topic() -> None:
    with pytest.raises(ValueError, match="cluster.learning on needs Kafka input and kafka.results_topic"):
        Pipeline(load_config(["--cluster-learning", "on", "--otlp-grpc", "off", "--otlp-http", "off",
                              "--metrics", "off"]))
    quiet = Pipeline(load_config(["--otlp-grpc", "off", "--otlp-http", "off", "--metrics", "off"]))
    assert quiet.cluster_feed is None and quiet.replica is None
