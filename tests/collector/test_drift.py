"""The drift detector alarms soon after precision drops and stays quiet on a stable stream."""
from __future__ import annotations

import random

from prometheus_client import generate_latest

from ctxprec.collector.metrics.drift import DriftDetector, DriftMonitor
from ctxprec.collector.metrics.registry import Metrics

BEFORE, AFTER = 400, 400
DETECT_WITHIN = 60  # scores after the change
DETECT_WITHIN_LUMPY = 100  # per-retrieval MAP is much noisier


def _gauss(rng: random.Random, mean: float) -> float:
    return min(1.0, max(0.0, rng.gauss(mean, 0.1)))


def _map_like(rng: random.Random, good: bool) -> float:
    """Per-retrieval MAP is lumpy: mostly 1.0 with a tail of partial and zero scores."""
    if rng.random() < (0.75 if good else 0.25):
        return 1.0
    return rng.choice([0.83, 0.5, 0.33, 0.0] if good else [0.5, 0.33, 0.0, 0.0])


def _first_alarm(scores: list[float]) -> int | None:
    detector = DriftDetector()
    for i, x in enumerate(scores):
        if detector.update(x):
            return i
    return None


def test_drop_from_0_9_to_0_4_alarms_within_bounded_samples_and_stable_stream_stays_quiet() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        dropping = [_gauss(rng, 0.9) for _ in range(BEFORE)] + [_gauss(rng, 0.4) for _ in range(AFTER)]
        alarm = _first_alarm(dropping)
        assert alarm is not None and BEFORE <= alarm < BEFORE + DETECT_WITHIN, (seed, alarm)

        rng = random.Random(1000 + seed)
        stable = [_gauss(rng, 0.9) for _ in range(BEFORE + AFTER)]
        assert _first_alarm(stable) is None, seed


def test_lumpy_map_scores_drop_alarms_and_stable_stays_quiet() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        dropping = [_map_like(rng, True) for _ in range(BEFORE)] + [_map_like(rng, False) for _ in range(AFTER)]
        alarm = _first_alarm(dropping)
        assert alarm is not None and BEFORE <= alarm < BEFORE + DETECT_WITHIN_LUMPY, (seed, alarm)

        rng = random.Random(1000 + seed)
        assert _first_alarm([_map_like(rng, True) for _ in range(BEFORE + AFTER)]) is None, seed


def test_alarm_clears_once_the_new_level_becomes_the_baseline() -> None:
    rng = random.Random(5)
    detector = DriftDetector()
    states = [detector.update(_gauss(rng, 0.9)) for _ in range(300)]
    states += [detector.update(_gauss(rng, 0.4)) for _ in range(3000)]
    assert not any(states[:300])
    assert any(states[300:400])
    assert not states[-1]  # hysteresis lets go once the baseline has caught up
    assert abs(detector.baseline - 0.4) < 0.1


def test_monitor_publishes_gauges_per_service() -> None:
    metrics = Metrics()
    monitor = DriftMonitor(metrics)
    rng = random.Random(11)
    for _ in range(300):
        monitor.update("good", _gauss(rng, 0.9))
        monitor.update("bad", _gauss(rng, 0.9))
    for _ in range(100):
        monitor.update("good", _gauss(rng, 0.9))
        monitor.update("bad", _gauss(rng, 0.4))
    text = generate_latest(metrics.registry).decode()
    assert 'ctxprec_precision_drift{service="bad"} 1.0' in text
    assert 'ctxprec_precision_drift{service="good"} 0.0' in text
    recent_bad = float(next(line.split()[-1] for line in text.splitlines()
                            if line.startswith('ctxprec_precision_recent{service="bad"}')))
    baseline_good = float(next(line.split()[-1] for line in text.splitlines()
                               if line.startswith('ctxprec_precision_baseline{service="good"}')))
    assert recent_bad < 0.6
    assert 0.8 < baseline_good < 0.95
