"""DiagnosticsSink end to end on Outcomes: noisy documents, the right top-k and its gauges,
the JSON bodies of the endpoints, and no document text unless previews are on."""
from __future__ import annotations

import json
import math
import random

import pytest

from ctxprec.collector.diagnostics.settings import DiagnosticsSettings
from ctxprec.collector.diagnostics.sink import DiagnosticsSink
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision
from ctxprec.scorer.documents import text_hash
from ctxprec.scorer.records import score_record
from tests.diagnostics.streams import NOISY, Scored, outcome, zipf_stream


def test_noisy_documents_through_the_sink_by_id_and_by_text_hash() -> None:
    metrics = Metrics()
    by_id = DiagnosticsSink(metrics=metrics)
    by_text = DiagnosticsSink()
    for n, scored in enumerate(zipf_stream(20_000), start=1):
        by_id.emit(outcome(scored))
        by_text.emit(outcome(scored, with_ids=False))
        if n == 2000:
            top = [d["document"] for d in by_id.documents_json({"limit": "5"}).body["summaries"][0]["documents"]]
            assert set(top) == NOISY
    body = by_id.documents_json({"service": "shop", "retriever": "kb", "limit": "5"}).body
    (summary,) = body["summaries"]
    assert body["slots"] == 1000 and summary["tracked"] == 1000 and summary["evictions"] > 0
    assert summary["exact_top"] is True
    assert {d["document"] for d in summary["documents"]} == NOISY
    assert all(d["kind"] == "id" for d in summary["documents"])
    # Without ids the same documents are found under the hash of their text.
    texts = {name: f"Text of {name}: how to reset a password, write to owner-{name}@example.com" for name in NOISY}
    hashed = by_text.documents_json({"limit": "5"}).body["summaries"][0]["documents"]
    assert {d["document"] for d in hashed} == {text_hash(t) for t in texts.values()}
    assert all(d["kind"] == "text_hash" for d in hashed)


def test_previews_off_never_contain_document_text() -> None:
    sink = DiagnosticsSink(DiagnosticsSettings(slice_attributes=("index.version",)))
    for scored in zipf_stream(500):
        sink.emit(outcome(scored, with_ids=False, attributes={"index.version": "v1"}))
    dumped = json.dumps([sink.documents_json({"limit": "1000"}).body, sink.drift_json({}).body,
                         sink.top_k_json({}).body])
    for word in ("Text of", "reset a password", "example.com", "owner-"):
        assert word not in dumped


def test_previews_on_are_short_and_redacted() -> None:
    redactions: list[str] = []

    def redact(text: str) -> str:
        redactions.append(text)
        return text.replace("@example.com", "@[REDACTED]")

    sink = DiagnosticsSink(DiagnosticsSettings(previews=True), redact=redact)
    for scored in zipf_stream(300):
        sink.emit(outcome(scored))
    documents = sink.documents_json({"limit": "20"}).body["summaries"][0]["documents"]
    assert documents and all(len(d["preview"]) <= 80 for d in documents)
    assert all("example.com" not in d["preview"] and d["preview"].startswith("Text of doc-") for d in documents)
    assert redactions  # only at read time
    with pytest.raises(ValueError):
        DiagnosticsSink(DiagnosticsSettings(previews=True))  # previews need a redaction callable


def test_ranks_six_to_ten_relevant_two_percent_give_k_5_and_the_gauges_say_so() -> None:
    metrics = Metrics()
    sink = DiagnosticsSink(metrics=metrics)
    rng = random.Random(9)
    after_five = 0
    requests = 3000
    for i in range(requests):
        relevant = [rng.random() < (0.6 if rank <= 5 else 0.02) for rank in range(1, 11)]
        contents = ["x" * rng.randint(100, 2000) for _ in range(10)]
        after_five += sum(len(c) for c in contents[5:])
        sink.emit(outcome(Scored([f"d{i}-{j}" for j in range(10)], relevant, contents), service="shop", retriever="dense"))
        if i == 0:
            # Before enough relevant contexts were seen the gauges exist but say nothing (NaN).
            value = metrics.registry.get_sample_value("ctxprec_recommended_k", {"service": "shop", "retriever": "dense"})
            assert value is not None and math.isnan(value)
    advice = sink.top_k.advice("shop", "dense")
    assert advice is not None and advice.recommended_k == 5
    expected_saved = after_five / 4 / requests
    assert advice.saved_tokens_per_request == pytest.approx(expected_saved, rel=1e-9)
    labels = {"service": "shop", "retriever": "dense"}
    assert metrics.registry.get_sample_value("ctxprec_recommended_k", labels) == 5
    assert metrics.registry.get_sample_value("ctxprec_recommended_k_saved_tokens", labels) == pytest.approx(expected_saved)
    body = sink.top_k_json({"service": "shop"}).body
    (pair,) = body["pairs"]
    assert pair["recommended_k"] == 5 and len(pair["curve"]) == 10 and pair["curve"][-1]["kept_share"] == 1.0


def test_labels_are_capped_like_the_metrics_so_pairs_stay_bounded() -> None:
    metrics = Metrics(max_services=2, max_retrievers=2)
    sink = DiagnosticsSink(metrics=metrics)
    for i in range(10):
        for j in range(10):
            sink.emit(outcome(Scored(["a"], [False]), service=f"svc{i}", retriever=f"r{j}"))
    pairs = sink.noisy.pairs()
    assert len(pairs) <= 9  # 3 x 3 at most: two of each plus `other`
    assert ("other", "other") in pairs
    assert sink.top_k.pairs() == pairs and len(sink.slices.services()) <= 3


def test_failed_outcomes_are_ignored_and_record_identities_are_reused() -> None:
    sink = DiagnosticsSink()
    failed = outcome(Scored(["a"], [False]))
    failed.decision, failed.result = Decision.FAILED, None
    sink.emit(failed)
    assert sink.noisy.pairs() == []
    # The identities the scoring workers wrote into the record are the ones counted.
    scored = outcome(Scored(["a", "b"], [False, False]), with_ids=False)
    assert scored.result is not None
    scored.record = score_record(scored.result, record_id="x", document_ids=["from-record-0", "from-record-1"])
    sink.emit(scored)
    rows = sink.documents_json({}).body["summaries"][0]["documents"]
    assert {r["document"] for r in rows} == {"from-record-0", "from-record-1"}


@pytest.mark.parametrize("limit", ["0", "-1", "abc", "1001"])
def test_a_bad_limit_is_a_400_naming_it(limit: str) -> None:
    response = DiagnosticsSink().documents_json({"limit": limit})
    assert response.status == 400 and "limit" in response.body["error"]


def test_unknown_service_gives_an_empty_list() -> None:
    sink = DiagnosticsSink()
    sink.emit(outcome(Scored(["a"], [False])))
    assert sink.documents_json({"service": "nope"}).body["summaries"] == []
    assert sink.documents_json({"retriever": "kb"}).body["summaries"][0]["service"] == "shop"
