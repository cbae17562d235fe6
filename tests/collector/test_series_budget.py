"""The series budget: however many service and retriever names the traffic brings, each metric
family keeps at most `max_series` series (the rest under `other`, counted), the scrape and
/diagnostics/top_k stay under a fixed size, and the per-minute activity line names the top
services and counts the rest."""
from __future__ import annotations

import json
import logging

from prometheus_client import generate_latest

from ctxprec.collector.diagnostics.sink import DiagnosticsSink
from ctxprec.collector.exporters.activity_log import TOP_SERVICES, ActivityLog
from ctxprec.collector.exporters.fanout import ResultFanout
from ctxprec.collector.metrics.children import OTHER, Children, SeriesBudget
from ctxprec.collector.metrics.drift import DriftMonitor
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.metrics.sink import MetricsSink
from ctxprec.collector.model import Decision, Outcome, Retrieval, RetrievedContext
from tests.helpers.rag_traces import score_of

NAMES = 5_000
# What a scrape holds when every family is full: about 13,000 series of ~100 bytes. Without the
# budget the same traffic made a 9 MB scrape (50 x 50 pairs of every family).
MAX_SCRAPE_BYTES = 2_000_000
MAX_TOP_K_BYTES = 150_000


def outcome(service: str, retriever: str, relevance: tuple[bool, ...] = (True, False, True)) -> Outcome:
    r = Retrieval(trace_id="ab" * 16, span_id="cd" * 8, service=service, query="q", retriever=retriever,
                  contexts=[RetrievedContext(f"context {i}") for i in range(len(relevance))])
    return Outcome(r, Decision.EVALUATED, score_of(relevance), None, {"id": "x"})


def series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{") or line.startswith(name + " ")]


def test_five_thousand_services_by_five_thousand_retrievers_keep_the_scrape_bounded() -> None:
    metrics = Metrics()
    diagnostics = DiagnosticsSink(metrics=metrics)
    fanout = ResultFanout(metrics, [MetricsSink(metrics, DriftMonitor(metrics)), diagnostics])
    # Every pair the per-label caps would let through (the first 50 of each), then every one of
    # the 5,000 names of each label.
    for s in range(50):
        for r in range(50):
            fanout.emit(outcome(f"service-{s}", f"retriever-{r}"))
    for i in range(NAMES):
        fanout.emit(outcome(f"service-{i}", f"retriever-{NAMES - 1 - i}"))

    scrape = generate_latest(metrics.registry)
    assert len(scrape) < MAX_SCRAPE_BYTES, len(scrape)
    text = scrape.decode()
    budget = metrics.budget.max_series
    for family in ("ctxprec_context_precision_bucket", "ctxprec_context_precision_weight_total",
                   "ctxprec_rank_judged_total", "ctxprec_samples_total"):
        assert len(series(text, family)) <= budget + 100, family  # the `other` series come on top, few
    assert any('retriever="other",service="other"' in line for line in series(text, "ctxprec_context_precision_count"))
    folded = {line.split('"')[1]: float(line.rsplit(" ", 1)[1])
              for line in series(text, "ctxprec_metric_series_folded_total")}
    assert folded["ctxprec_context_precision"] > 0 and folded["ctxprec_context_precision_weight"] > 0
    # Every score is still counted: the folded ones under `other`.
    counts = sum(float(line.rsplit(" ", 1)[1]) for line in series(text, "ctxprec_context_precision_count"))
    assert counts == 50 * 50 + NAMES

    top_k = diagnostics.top_k_json({})
    body = json.dumps(top_k.body).encode()
    assert top_k.status == 200 and len(body) < MAX_TOP_K_BYTES, len(body)
    pairs = {(p["service"], p["retriever"]) for p in top_k.body["pairs"]}
    assert (OTHER, OTHER) in pairs
    # The diagnostics keep the pairs the precision histogram keeps.
    kept = {(line.split('service="')[1].split('"')[0], line.split('retriever="')[1].split('"')[0])
            for line in series(text, "ctxprec_context_precision_count")}
    assert pairs <= kept


def test_the_budget_folds_once_full_and_warns_once(caplog) -> None:
    metrics = Metrics(max_series=13 * 3)  # three children of a histogram (11 buckets, sum, count)
    first = Children(metrics.context_precision, metrics.budget)
    second = Children(metrics.context_precision, metrics.budget)
    with caplog.at_level(logging.WARNING):
        for i in range(3):
            first(f"s{i}", "r").observe(0.5)
        second("s9", "r").observe(0.5)  # another user of the same family shares its budget
        second("s10", "r").observe(0.5)
        first("s0", "r").observe(0.5)  # admitted before: stays its own
    text = generate_latest(metrics.registry).decode()
    assert 'ctxprec_context_precision_count{retriever="r",service="s0"} 2.0' in text
    assert 'ctxprec_context_precision_count{retriever="other",service="other"} 2.0' in text
    assert 'ctxprec_metric_series_folded_total{metric="ctxprec_context_precision"} 2.0' in text
    assert first("s11", "r") is first(OTHER, OTHER)
    warnings = [r for r in caplog.records if "budget" in r.getMessage()]
    assert len(warnings) == 1 and "--max-series-per-metric" in warnings[0].getMessage()


def test_past_the_budget_the_fixed_labels_are_kept() -> None:
    metrics = Metrics(max_series=4)  # four children of a counter (one series each)
    ranks = Children(metrics.rank_judged, metrics.budget)
    for service in ("a", "b", "c"):
        for rank in ("1", "2"):
            ranks(service, rank, "true").inc()
    text = generate_latest(metrics.registry).decode()
    kept = [line for line in series(text, "ctxprec_rank_judged_total")]
    assert len(kept) == 6
    assert 'ctxprec_rank_judged_total{rank="1",relevant="true",service="other"} 1.0' in kept
    assert 'ctxprec_rank_judged_total{rank="2",relevant="true",service="other"} 1.0' in kept


def test_families_with_fixed_labels_only_are_not_folded() -> None:
    budget = SeriesBudget(1)
    family = budget.family("ctxprec_judge_requests", ("model", "outcome"))
    assert [family.admit(("m", str(i))) for i in range(5)] == [("m", str(i)) for i in range(5)]


def test_the_activity_line_names_the_top_services_and_counts_the_rest() -> None:
    activity = ActivityLog(lambda: 0.0, logging.getLogger("test.activity"))
    for i in range(17_000):
        activity.emit(outcome(f"service-with-a-long-name-{i:05d}", "r"))
    for _ in range(5):
        activity.emit(outcome("busiest", "r", (True,)))
    line = activity.tick()
    assert len(line) < 1_000, len(line)
    assert line.startswith("last minute: 0 spans received, 17,005 retrievals evaluated")
    assert "busiest 1.00" in line and "more services (16,991 scores, mean 0.83)" in line
    assert line.count("service-with-a-long-name-") == TOP_SERVICES - 1
