"""Which slice dropped: slice statistics, the decomposition of a service's change, and the
explanation the drift alarm produces through the real DriftMonitor."""
from __future__ import annotations

import json
import logging
import random

import pytest

from ctxprec.collector.diagnostics.drift_explain import DriftExplainer, explain
from ctxprec.collector.diagnostics.settings import DiagnosticsSettings
from ctxprec.collector.diagnostics.sink import DiagnosticsSink
from ctxprec.collector.diagnostics.slices import OTHER, UNSET, SliceTracker
from ctxprec.collector.metrics.drift import DriftMonitor
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.metrics.sink import MetricsSink
from tests.diagnostics.streams import Scored, outcome

SLICED = ("index.version", "tenant.tier")


class Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__()
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def drifting_service(seed: int, *, new_version: bool = False, change_at: int = 1500,
                     total: int = 4000) -> tuple[DiagnosticsSink, Metrics, int | None, list[logging.LogRecord]]:
    """Service `shop`, two retrievers and two index versions and two tenant tiers, evenly mixed,
    scoring about 0.85; from score `change_at` on, retrievals by `dense` on index version v2 (or,
    with `new_version`, on a newly deployed v3 taking half of the traffic) score about 0.35."""
    rng = random.Random(seed)
    metrics = Metrics()
    drift = DriftMonitor(metrics)
    records: list[logging.LogRecord] = []
    logger = logging.getLogger(f"test.drift.{seed}.{new_version}")
    logger.propagate = False
    logger.addHandler(Collect(records))
    sink = DiagnosticsSink(DiagnosticsSettings(slice_attributes=SLICED), metrics=metrics, drift=drift, logger=logger)
    drift.on_alarm = sink.explainer
    metrics_sink = MetricsSink(metrics, drift)
    alarm_at = None
    bad_version = "v3" if new_version else "v2"
    for i in range(total):
        retriever = rng.choice(["dense", "bm25"])
        version = rng.choice(["v1", "v3" if new_version and i >= change_at else "v2"])
        tier = rng.choice(["free", "pro"])
        bad = i >= change_at and retriever == "dense" and version == bad_version
        score = min(1.0, max(0.0, rng.gauss(0.35, 0.15) if bad else rng.gauss(0.85, 0.12)))
        result = outcome(Scored(["a", "b"], [True, False]), service="shop", retriever=retriever,
                         attributes={"index.version": version}, score=score)
        result.retrieval.resource = {"tenant.tier": tier}  # read from the resource when the span lacks it
        metrics_sink.emit(result)
        sink.emit(result)
        if sink.explainer.at_alarm("shop") is not None:
            alarm_at = i
            break
    return sink, metrics, alarm_at, records


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_drop_in_one_retriever_and_one_index_version_names_both(seed: int) -> None:
    sink, metrics, alarm_at, records = drifting_service(seed)
    assert alarm_at is not None and alarm_at >= 1500, "the drift detector should alarm after the change"
    explanation = sink.explainer.at_alarm("shop")
    assert explanation is not None and explanation.direction == "drop"
    assert explanation.retriever.named == ["dense"]
    by_name = {d.name: d for d in explanation.attributes}
    assert by_name["index.version"].named == ["v2"]
    assert by_name["tenant.tier"].named == []  # the drop is spread over tiers as their traffic is
    # One log line, naming both.
    (line,) = [r.getMessage() for r in records]
    assert "\n" not in line
    assert "retriever dense" in line and "index.version=v2" in line and "tenant.tier=" not in line
    # The contributions add up to the change, per dimension.
    for dimension in [explanation.retriever, *explanation.attributes]:
        assert sum(s.share_of_change for s in dimension.slices) == pytest.approx(1.0)
    # The JSON view carries it, and no slice value reached a Prometheus label.
    body = sink.drift_json({}).body
    (service,) = body["services"]
    assert service["service"] == "shop" and service["alarmed"] is True
    assert service["at_alarm"]["retriever"]["named"] == ["dense"]
    assert json.loads(json.dumps(body)) == body
    exposition = "\n".join(f"{s.name}{s.labels}" for f in metrics.registry.collect() for s in f.samples)
    assert "v2" not in exposition and "tenant" not in exposition and "pro" not in exposition


@pytest.mark.parametrize("seed", [1, 2])
def test_a_newly_deployed_index_version_is_named_without_a_baseline_of_its_own(seed: int) -> None:
    sink, _, alarm_at, _ = drifting_service(seed, new_version=True)
    assert alarm_at is not None and alarm_at >= 1500
    explanation = sink.explainer.at_alarm("shop")
    assert explanation is not None
    versions = {d.name: d for d in explanation.attributes}["index.version"]
    assert versions.named == ["v3"]
    # v3's own baseline is made of its recent scores: it is named for taking traffic while scoring low.
    v3 = next(s for s in versions.slices if s.value == "v3")
    assert versions.driver == "mix" and v3.baseline_traffic_share < 0.05 < 0.15 < v3.traffic_share
    assert explanation.retriever.named == ["dense"]


def test_contributions_split_within_and_mix_exactly() -> None:
    tracker = SliceTracker(["tier"], recent_half_life=1e6, baseline_half_life=2e6)  # ~no decay: plain sums
    for _ in range(100):
        tracker.observe("s", "r", 0.8, {"tier": "a"})
        tracker.observe("s", "r", 0.4, {"tier": "b"})
    snapshot = tracker.snapshot("s")
    assert snapshot is not None
    result = explain(snapshot, at=0.0)
    assert result is not None and result.change == pytest.approx(0.0, abs=1e-6)
    assert "do not differ" in result.message()


def test_a_shift_of_traffic_towards_a_low_slice_is_a_mix_effect() -> None:
    # Tier b always scores 0.4, tier a 0.8; b's traffic grows from 10% to 90% of the recent scores.
    tracker = SliceTracker(["tier"], recent_half_life=20, baseline_half_life=2000)
    rng = random.Random(4)
    for i in range(3000):
        tier = "b" if rng.random() < (0.1 if i < 2800 else 0.9) else "a"
        tracker.observe("s", "r", 0.8 if tier == "a" else 0.4, {"tier": tier})
    snapshot = tracker.snapshot("s")
    assert snapshot is not None
    result = explain(snapshot, at=0.0)
    assert result is not None and result.change < -0.1
    tiers = result.attributes[0]
    assert tiers.named == ["b"] and tiers.driver == "mix"
    b = next(s for s in tiers.slices if s.value == "b")
    assert b.recent_mean == pytest.approx(0.4) and b.baseline_mean == pytest.approx(0.4)  # b itself did not change


def test_values_are_capped_per_attribute_and_stale_ones_make_room() -> None:
    tracker = SliceTracker(["index.version"], max_values=3, recent_half_life=5, baseline_half_life=10)
    for version in ("v1", "v2", "v3", "v4"):
        tracker.observe("s", "r", 0.9, {"index.version": version})
    tracker.observe("s", "r", 0.9, {})
    snapshot = tracker.snapshot("s")
    assert snapshot is not None
    assert sorted(v.value for v in snapshot.attributes["index.version"]) == sorted(["v1", "v2", "v3", OTHER, UNSET])
    # Long after v1..v3 were last seen, a new version takes a stale value's place.
    for _ in range(500):
        tracker.observe("s", "r", 0.9, {"index.version": "v4"})
    snapshot = tracker.snapshot("s")
    assert snapshot is not None
    values = {v.value for v in snapshot.attributes["index.version"]}
    assert "v4" in values and len(values - {OTHER, UNSET}) <= 3


def test_too_many_slice_attributes_are_refused() -> None:
    with pytest.raises(ValueError):
        SliceTracker([f"a{i}" for i in range(11)])
    with pytest.raises(ValueError):
        SliceTracker(["a"], recent_half_life=100, baseline_half_life=50)


def test_the_explainer_never_raises_into_the_metrics_path(caplog: pytest.LogCaptureFixture) -> None:
    explainer = DriftExplainer(SliceTracker())
    explainer("never-seen")  # no statistics: a line saying so, no exception
    assert explainer.at_alarm("never-seen") is None
    assert "no slice statistics" in caplog.text


def test_the_drift_monitor_calls_the_hook_once_per_rising_alarm() -> None:
    calls: list[str] = []
    monitor = DriftMonitor(None, on_alarm=calls.append)
    rng = random.Random(0)
    for _ in range(400):
        monitor.update("svc", min(1.0, max(0.0, rng.gauss(0.9, 0.05))))
    assert calls == []
    alarmed_scores = 0
    for _ in range(200):
        alarmed_scores += monitor.update("svc", min(1.0, max(0.0, rng.gauss(0.3, 0.05))))
    assert alarmed_scores > 10 and calls == ["svc"]


def test_decayed_statistics_match_a_direct_computation_across_renormalizations() -> None:
    # Half-lives this short make the weights pass the renormalization threshold many times.
    tracker = SliceTracker(["v"], recent_half_life=2, baseline_half_life=7)
    rng = random.Random(8)
    scores = [(rng.random(), rng.choice(["a", "b"])) for _ in range(20_000)]
    for score, value in scores:
        tracker.observe("s", "r", score, {"v": value})
    snapshot = tracker.snapshot("s")
    assert snapshot is not None and snapshot.scores == len(scores)
    last = len(scores) - 1
    for half_life, n_field, sum_field in ((2, "recent_n", "recent_sum"), (7, "base_n", "base_sum")):
        for value in ("a", "b"):
            weights = [(0.5 ** ((last - i) / half_life), s) for i, (s, v) in enumerate(scores) if v == value]
            stats = next(x for x in snapshot.attributes["v"] if x.value == value)
            assert getattr(stats, n_field) == pytest.approx(sum(w for w, _ in weights), rel=1e-9)
            assert getattr(stats, sum_field) == pytest.approx(sum(w * s for w, s in weights), rel=1e-9)
