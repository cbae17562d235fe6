"""The weighted precision counters estimate the traffic, not the sample: scores taken at different
sample rates count 1/rate times, and the band arithmetic gives Kish's effective sample size."""
from __future__ import annotations

import math
import random

import pytest

from ctxprec.collector.metrics.confidence import WeightedSums
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.metrics.sink import MetricsSink
from ctxprec.collector.model import Decision, Outcome, Retrieval, RetrievedContext
from ctxprec.scorer.result import ScoreResult, Verdict


def _outcome(score: float, rate: float, *, scale: float = 1.0, service: str = "shop",
             retriever: str = "kb") -> Outcome:
    retrieval = Retrieval(trace_id="ab" * 16, span_id="cd" * 8, service=service, query="q",
                          contexts=[RetrievedContext("c")], retriever=retriever, sample_rate=rate)
    result = ScoreResult(score=score * scale, reason="", verdicts=[Verdict(0, score > 0.5, "")],
                         precision_at_k=score, hit=score > 0, first_relevant_rank=1, relevant_count=1, k=1,
                         scale=scale, reference_kind="output")
    return Outcome(retrieval, Decision.EVALUATED, result, None, {})


def _value(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


def _sums(metrics: Metrics, service: str = "shop", retriever: str = "kb") -> WeightedSums:
    labels = {"service": service, "retriever": retriever}
    return WeightedSums(
        weight=_value(metrics, "ctxprec_context_precision_weight_total", **labels),
        weighted_sum=_value(metrics, "ctxprec_context_precision_weighted_sum_total", **labels),
        weighted_squares=_value(metrics, "ctxprec_context_precision_weighted_squares_total", **labels),
        weight_squares=_value(metrics, "ctxprec_context_precision_weight_squares_total", **labels))


def test_a_mix_of_rates_gives_the_population_mean_not_the_sample_mean() -> None:
    # The traffic: 10,000 retrievals on a route scoring 0.9, 10,000 on one scoring 0.3, so the
    # population mean is 0.6. The first route is sampled at 50%, the second at 5%: the sample is
    # mostly the good route and its plain mean is about 0.85.
    rng = random.Random(3)
    metrics = Metrics()
    sink = MetricsSink(metrics)
    scores: list[float] = []
    for route_score, rate in ((0.9, 0.5), (0.3, 0.05)):
        for _ in range(10_000):
            if rng.random() < rate:
                sink.emit(_outcome(route_score, rate))
                scores.append(route_score)
    sample_mean = sum(scores) / len(scores)
    assert sample_mean > 0.8

    sums = _sums(metrics)
    band = sums.band()
    assert band is not None
    assert abs(band.mean - 0.6) < 0.03, band
    assert band.low < 0.6 < band.high
    # The histogram beside it still holds the plain sample mean.
    hist_sum = _value(metrics, "ctxprec_context_precision_sum", service="shop", retriever="kb")
    hist_count = _value(metrics, "ctxprec_context_precision_count", service="shop", retriever="kb")
    assert hist_sum / hist_count == pytest.approx(sample_mean)
    # The weights estimate the traffic's size too.
    assert abs(sums.weight - 20_000) < 1_500


def test_counters_hold_the_exact_sums_on_the_normalised_score() -> None:
    metrics = Metrics()
    sink = MetricsSink(metrics)
    sink.emit(_outcome(0.5, 0.25, scale=10.0))  # score 5 on a 0..10 scale, weight 4
    sink.emit(_outcome(1.0, 1.0, scale=10.0))  # weight 1
    sums = _sums(metrics)
    assert sums.weight == pytest.approx(5.0)
    assert sums.weighted_sum == pytest.approx(4 * 0.5 + 1.0)
    assert sums.weighted_squares == pytest.approx(4 * 0.25 + 1.0)
    assert sums.weight_squares == pytest.approx(16 + 1)


def test_failed_outcomes_and_bad_rates_do_not_skew_the_sums() -> None:
    metrics = Metrics()
    sink = MetricsSink(metrics)
    failed = _outcome(0.0, 0.1)
    failed.decision = Decision.FAILED
    sink.emit(failed)
    sink.emit(Outcome(failed.retrieval, Decision.NOT_SAMPLED))  # every decision reaches the sinks
    assert metrics.registry.get_sample_value(
        "ctxprec_context_precision_weight_total", {"service": "shop", "retriever": "kb"}) is None
    sink.emit(_outcome(0.8, 0.0))  # a rate that is no probability counts once, never divides by 0
    assert _sums(metrics).weight == pytest.approx(1.0)


def test_labels_are_capped_like_the_histogram() -> None:
    metrics = Metrics(max_services=1)
    sink = MetricsSink(metrics)
    sink.emit(_outcome(1.0, 0.5, service="first"))
    sink.emit(_outcome(0.0, 0.5, service="second"))
    assert _sums(metrics, service="first").weight == pytest.approx(2.0)
    assert _sums(metrics, service="other").weight == pytest.approx(2.0)


def test_kish_effective_sample_size_and_stderr() -> None:
    equal = WeightedSums()
    for x in (0.0, 1.0) * 50:
        equal.add(x, 0.1)
    band = equal.band()
    assert band is not None
    assert band.n_eff == pytest.approx(100)  # equal weights: n_eff is the count
    assert band.mean == pytest.approx(0.5)
    assert band.stderr == pytest.approx(math.sqrt(0.25 / 99))
    assert band.low == pytest.approx(0.5 - 1.96 * band.stderr)

    # Unequal weights cost precision: 90 scores at weight 1 and 10 at weight 10 are worth fewer
    # than 100 equal ones (Kish: (90 + 100)^2 / (90 + 1000)).
    mixed = WeightedSums()
    for i in range(100):
        mixed.add(float(i % 2), 1.0 if i < 90 else 0.1)
    band = mixed.band()
    assert band is not None
    assert band.n_eff == pytest.approx(190 ** 2 / 1090)


def test_no_band_from_fewer_than_two_effective_scores() -> None:
    sums = WeightedSums()
    assert sums.band() is None
    sums.add(0.7, 0.01)
    assert sums.band() is None


def test_the_band_holds_the_true_mean_about_95_percent_of_the_time() -> None:
    # MAP-like scores (mostly 1, a tail of 0) at mixed rates; 400 independent windows.
    rng = random.Random(17)
    values, probs = (1.0, 0.5, 0.0), (0.7, 0.2, 0.1)
    true_mean = sum(v * p for v, p in zip(values, probs))
    held = 0
    for _ in range(400):
        sums = WeightedSums()
        for _ in range(3000):
            rate = 0.02 if rng.random() < 0.5 else 0.1
            if rng.random() < rate:
                sums.add(rng.choices(values, probs)[0], rate)
        band = sums.band()
        assert band is not None
        held += band.holds(true_mean)
    assert 0.91 <= held / 400 <= 0.99, held
