"""Adaptive sampling: a service's rate rises while its drift statistic is past the warning level,
returns to base when the alarm is confirmed or the statistic falls back, and stays a threshold on
the trace-id hash (a boosted sample holds every trace the base rate keeps)."""
from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from prometheus_client import generate_latest

from ctxprec.collector.metrics.drift import DriftMonitor
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.sampling.adaptive import AdaptiveSampler, AdaptiveSettings, Phase
from ctxprec.collector.sampling.sampler import Sampler, SamplingRule, below_rate


@dataclass
class FakeDetector:
    statistic: float = 0.0
    alarmed: bool = False


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _ids(n: int, seed: int = 5) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.getrandbits(128).to_bytes(16, "big") for _ in range(n)]


SETTINGS = AdaptiveSettings(warning=0.3, factor=10.0, max_rate=0.5, confirm_scores=3, max_boost_s=60.0)


def _sampler(rate: float = 0.01, settings: AdaptiveSettings = SETTINGS, clock: FakeClock | None = None) -> AdaptiveSampler:
    return AdaptiveSampler(Sampler(rate), settings, clock=clock or FakeClock())


def test_rate_rises_past_the_warning_level_and_falls_back_below_it() -> None:
    adaptive = _sampler()
    detector = FakeDetector()
    assert adaptive.rate("shop") == 0.01
    detector.statistic = 0.29
    adaptive.observe("shop", detector)
    assert adaptive.phase("shop") is Phase.BASE and adaptive.rate("shop") == 0.01
    detector.statistic = 0.31
    adaptive.observe("shop", detector)
    assert adaptive.phase("shop") is Phase.BOOSTED
    assert adaptive.rate("shop") == pytest.approx(0.1)
    assert adaptive.rate("search") == 0.01  # other services keep their rate
    detector.statistic = 0.2
    adaptive.observe("shop", detector)
    assert adaptive.phase("shop") is Phase.BASE and adaptive.rate("shop") == 0.01


def test_a_confirmed_alarm_returns_to_base_and_holds_until_the_detector_settles() -> None:
    adaptive = _sampler()
    detector = FakeDetector(statistic=0.5)
    adaptive.observe("shop", detector)
    assert adaptive.phase("shop") is Phase.BOOSTED
    detector.statistic, detector.alarmed = 1.2, True
    for _ in range(2):
        adaptive.observe("shop", detector)
        assert adaptive.phase("shop") is Phase.BOOSTED  # not confirmed yet
    adaptive.observe("shop", detector)
    assert adaptive.phase("shop") is Phase.HOLD and adaptive.rate("shop") == 0.01
    # Still past the warning level after the alarm cleared: no second boost for the same drift.
    detector.alarmed, detector.statistic = False, 0.4
    adaptive.observe("shop", detector)
    assert adaptive.phase("shop") is Phase.HOLD
    detector.statistic = 0.1
    adaptive.observe("shop", detector)
    assert adaptive.phase("shop") is Phase.BASE


def test_an_alarm_that_flickers_off_is_not_confirmed() -> None:
    adaptive = _sampler()
    detector = FakeDetector(statistic=0.5)
    adaptive.observe("shop", detector)
    for alarmed in (True, True, False, True, True):
        detector.alarmed = alarmed
        adaptive.observe("shop", detector)
    assert adaptive.phase("shop") is Phase.BOOSTED


def test_a_boost_that_neither_alarms_nor_falls_back_ends_after_max_boost() -> None:
    clock = FakeClock()
    adaptive = _sampler(clock=clock)
    detector = FakeDetector(statistic=0.5)
    adaptive.observe("shop", detector)
    clock.now += 59
    adaptive.observe("shop", detector)
    assert adaptive.phase("shop") is Phase.BOOSTED
    clock.now += 2
    adaptive.observe("shop", detector)
    assert adaptive.phase("shop") is Phase.HOLD and adaptive.rate("shop") == 0.01


def test_boosted_rate_is_capped_never_lowered_and_zero_stays_zero() -> None:
    rules = [SamplingRule(rate=0.0, service="internal"), SamplingRule(rate=0.8, service="vip")]
    adaptive = AdaptiveSampler(Sampler(0.2, rules), SETTINGS, clock=FakeClock())
    hot = FakeDetector(statistic=0.9)
    for service in ("internal", "vip", "shop"):
        adaptive.observe(service, hot)
    assert adaptive.rate("shop") == 0.5  # 0.2 * 10, capped at max_rate
    assert adaptive.rate("vip") == 0.8  # already above the cap: unchanged
    assert adaptive.rate("internal") == 0.0  # excluded on purpose
    assert adaptive.decide("ab" * 16, "internal", {}).rate == 0.0


def test_a_boosted_sample_holds_every_trace_the_base_rate_keeps() -> None:
    ids = _ids(20_000)
    base = Sampler(0.01)
    adaptive = _sampler()
    adaptive.observe("shop", FakeDetector(statistic=0.5))
    kept_base = {t for t in ids if base.keep_trace(t, "shop")}
    kept_boosted = {t for t in ids if adaptive.keep_trace(t, "shop")}
    decided_base = {t for t in ids if base.decide(t.hex(), "shop", {}).sampled}
    decided_boosted = {t for t in ids if adaptive.decide(t.hex(), "shop", {}).sampled}
    assert kept_base and kept_base < kept_boosted
    assert decided_base == kept_base and decided_base < decided_boosted
    assert 0.08 < len(decided_boosted) / len(ids) < 0.12
    # The boosted extra is exactly the traces between the two thresholds.
    assert all(below_rate(t, 0.1) and not below_rate(t, 0.01) for t in kept_boosted - kept_base)


def test_a_retrieval_is_never_recorded_above_the_rate_its_trace_was_kept_at() -> None:
    adaptive = _sampler()
    detector = FakeDetector()
    ids = _ids(5_000, seed=9)
    kept_at_base = [t for t in ids if adaptive.keep_trace(t, "shop")]
    detector.statistic = 0.5
    adaptive.observe("shop", detector)  # the boost starts while those traces are being assembled
    for t in kept_at_base:
        decision = adaptive.decide(t.hex(), "shop", {})
        assert decision.sampled and decision.rate == 0.01
    kept_boosted = [t for t in ids if adaptive.keep_trace(t, "shop")]
    assert all(adaptive.decide(t.hex(), "shop", {}).rate == pytest.approx(0.1) for t in kept_boosted)
    detector.statistic = 0.0
    adaptive.observe("shop", detector)  # the boost ends before they are decided
    decisions = [adaptive.decide(t.hex(), "shop", {}) for t in kept_boosted]
    assert all(d.rate == 0.01 for d in decisions)
    assert {t for t, d in zip(kept_boosted, decisions) if d.sampled} == set(kept_at_base)


def test_weights_stay_unbiased_when_boosts_start_and_stop_between_head_and_decision() -> None:
    # Each trace's head decision and its retrieval's decision straddle random boost switches;
    # summing 1 / recorded rate over the sampled retrievals must still count the traffic.
    rng = random.Random(2)
    adaptive = _sampler(rate=0.05)
    detector = FakeDetector()
    ids = _ids(200_000, seed=4)
    pending: list[bytes] = []
    estimate = 0.0
    for i, t in enumerate(ids):
        if i % 500 == 0:
            detector.statistic = 0.5 if rng.random() < 0.5 else 0.0
            adaptive.observe("shop", detector)
        if adaptive.keep_trace(t, "shop"):
            pending.append(t)
        if len(pending) > 300 or i == len(ids) - 1:  # the buffer releases traces a while later
            for held in pending:
                decision = adaptive.decide(held.hex(), "shop", {})
                if decision.sampled:
                    estimate += 1.0 / decision.rate
            pending.clear()
    assert abs(estimate / len(ids) - 1.0) < 0.03, estimate


def test_disabled_never_boosts() -> None:
    adaptive = _sampler(settings=AdaptiveSettings(enabled=False))
    adaptive.observe("shop", FakeDetector(statistic=0.9))
    assert adaptive.phase("shop") is Phase.BASE and adaptive.rate("shop") == 0.01


def test_gauge_follows_the_rate_through_subscribe() -> None:
    metrics = Metrics()
    adaptive = AdaptiveSampler(Sampler(0.01), SETTINGS, key=metrics.service, clock=FakeClock())
    adaptive.subscribe(lambda service, rate: metrics.sample_rate.labels(service).set(rate))
    adaptive.decide("ab" * 16, "shop", {})
    adaptive.decide("ab" * 16, "search", {})
    adaptive.observe("shop", FakeDetector(statistic=0.5))
    text = generate_latest(metrics.registry).decode()
    assert 'ctxprec_sample_rate{service="shop"} 0.1' in text
    assert 'ctxprec_sample_rate{service="search"} 0.01' in text


def test_generation_moves_with_every_rate_change_only() -> None:
    adaptive = _sampler()
    detector = FakeDetector()
    adaptive.decide("ab" * 16, "shop", {})
    seen = adaptive.generation
    adaptive.observe("shop", detector)
    assert adaptive.generation == seen  # no change of rate
    detector.statistic = 0.5
    adaptive.observe("shop", detector)
    assert adaptive.generation == seen + 1
    detector.statistic = 0.0
    adaptive.observe("shop", detector)
    assert adaptive.generation == seen + 2


def test_drift_monitor_hook_boosts_the_drifting_service_only() -> None:
    rng = random.Random(8)
    monitor = DriftMonitor(None)
    adaptive = AdaptiveSampler(Sampler(0.01), AdaptiveSettings(warning=0.2, factor=10.0), clock=FakeClock())
    monitor.observers.append(adaptive.observe)

    def score(mean: float) -> float:
        return 1.0 if rng.random() < mean else 0.0

    for _ in range(400):
        monitor.update("good", score(0.85))
        monitor.update("bad", score(0.85))
    phases: set[Phase] = set()
    for _ in range(300):
        monitor.update("good", score(0.85))
        monitor.update("bad", score(0.5))
        phases.add(adaptive.phase("bad"))
    assert Phase.BOOSTED in phases and Phase.HOLD in phases
    assert monitor.detectors["bad"].alarmed
    assert adaptive.rate("good") == 0.01


def test_statistic_is_the_cusum_as_a_share_of_the_threshold() -> None:
    monitor = DriftMonitor(None)
    rng = random.Random(1)
    for _ in range(100):
        monitor.update("shop", 1.0 if rng.random() < 0.85 else 0.0)
    detector = monitor.detectors["shop"]
    assert detector.warmed_up and detector.statistic == 0.0
    while not detector.alarmed:
        monitor.update("shop", 0.0)
        if not detector.alarmed:
            assert detector.statistic <= 1.0
    assert detector.statistic > 1.0


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="warning"):
        AdaptiveSettings(warning=1.5)
    with pytest.raises(ValueError, match="factor"):
        AdaptiveSettings(factor=0.5)
    with pytest.raises(ValueError, match="max_rate"):
        AdaptiveSettings(max_rate=0.0)
