"""Precision drift: a sequential change detector per service (the metrics sink, metrics/sink.py,
feeds it every score).

The detector is a two-sided CUSUM on the normalised score stream, measured against a slowly
moving EWMA baseline:

- warm-up: the first `warmup` scores only estimate the baseline mean and spread (no alarm);
- then scores are averaged in blocks of `batch` (single MAP scores are far from normal: mostly
  1.0 with a heavy tail of zeros; block means behave) and each block mean m adds
  (baseline - m) - k to the "down" sum and (m - baseline) - k to the "up" sum (both floored at
  0), with k = `slack` spreads of a block mean; the alarm rises when a sum passes h =
  `threshold` spreads;
- hysteresis: once alarmed, it clears only when both sums fall below h * `clear_ratio`. The sums
  are capped at 2h so that a long alarm can clear in bounded time;
- the baseline keeps moving (EWMA, `baseline_alpha`), slowly, so a lasting new level becomes the
  new normal after a few hundred scores and the alarm then clears.

Scores are noisy per retrieval (MAP over a handful of contexts), so the spread is estimated and
floored at `min_sigma`: k and h scale with it and the false-alarm rate stays low on stable data.
"""
from __future__ import annotations

import math
from typing import Annotated, Callable

from ctxprec.collector.components import Stateless
from ctxprec.collector.config_types import Count, Positive, Rate, setting
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import PeerScore
from pydantic import AfterValidator, BaseModel, ConfigDict


def _above_zero(value: float) -> float:
    if value <= 0:
        raise ValueError(f"must be > 0, got {value!r}")
    return value


FractionAboveZero = Annotated[Rate, AfterValidator(_above_zero)]


class DriftConfig(BaseModel):
    """The drift detector (YAML section `drift`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    warmup: Count = setting(100, "scores per service that only estimate the baseline before any alarm")
    baseline_alpha: FractionAboveZero = setting(0.005, "weight of each new score in the slowly moving baseline")
    recent_alpha: FractionAboveZero = setting(0.1, "weight of each new score in the recent mean")
    batch: Count = setting(8, "scores averaged per detector step")
    slack: Positive = setting(0.75, "allowance k, in spreads of a block mean")
    threshold: Positive = setting(8.0, "alarm level h, in spreads of a block mean")
    clear_ratio: FractionAboveZero = setting(0.25, "the alarm clears when both sums fall below threshold x this")
    min_sigma: Positive = setting(0.05, "floor of the estimated spread of scores")


class DriftDetector:
    def __init__(self, settings: DriftConfig | None = None) -> None:
        self.settings = settings or DriftConfig()
        self.count = 0
        self.baseline = 0.0
        self.variance = 0.0
        self.recent = 0.0
        self.down = 0.0
        self.up = 0.0
        self.alarmed = False
        self._m2 = 0.0  # Welford sum of squares during warm-up
        self._block_sum = 0.0
        self._block_n = 0

    @property
    def sigma(self) -> float:
        return max(self.settings.min_sigma, math.sqrt(max(0.0, self.variance)))

    @property
    def warmed_up(self) -> bool:
        return self.count >= self.settings.warmup

    @property
    def statistic(self) -> float:
        """The larger CUSUM sum as a fraction of the alarm threshold h: the alarm rises past 1.
        0 during warm-up. Lets others (adaptive sampling) act on a drift before it is an alarm."""
        if not self.warmed_up:
            return 0.0
        s = self.settings
        h = s.threshold * self.sigma / math.sqrt(s.batch)
        return max(self.down, self.up) / h

    def update(self, x: float) -> bool:
        """Feed one score on 0..1; returns whether the detector is alarmed after it."""
        s = self.settings
        self.count += 1
        if self.count == 1:
            self.recent = x
        else:
            self.recent += s.recent_alpha * (x - self.recent)
        if self.count <= s.warmup:
            delta = x - self.baseline
            self.baseline += delta / self.count
            self._m2 += delta * (x - self.baseline)
            self.variance = self._m2 / self.count
            return False

        deviation = x - self.baseline
        self._block_sum += x
        self._block_n += 1
        if self._block_n >= s.batch:
            mean = self._block_sum / self._block_n
            self._block_sum, self._block_n = 0.0, 0
            self._step(mean - self.baseline, self.sigma / math.sqrt(s.batch))
        self.baseline += s.baseline_alpha * deviation
        self.variance += s.baseline_alpha * (deviation * deviation - self.variance)
        return self.alarmed

    def _step(self, deviation: float, sigma: float) -> None:
        s = self.settings
        k, h = s.slack * sigma, s.threshold * sigma
        self.down = min(2 * h, max(0.0, self.down - deviation - k))
        self.up = min(2 * h, max(0.0, self.up + deviation - k))
        if not self.alarmed and (self.down > h or self.up > h):
            self.alarmed = True
        elif self.alarmed and self.down < h * s.clear_ratio and self.up < h * s.clear_ratio:
            self.alarmed = False


DriftObserver = Callable[[str, DriftDetector], None]


class DriftMonitor(Stateless):
    """One detector per (capped) service label, mirrored into the precision gauges. Each
    observer is called with the label and its detector after every score (adaptive sampling).
    Its own replica's scores come through `update` (the metrics sink); with cluster learning the
    other replicas' come through `peer_score` (a `PeerScores`), so that every replica's detector
    follows the whole service."""

    def __init__(self, metrics: Metrics | None, settings: DriftConfig | None = None,
                 on_alarm: Callable[[str], None] | None = None) -> None:
        self.metrics = metrics
        self.settings = settings or DriftConfig()
        self.detectors: dict[str, DriftDetector] = {}
        self.observers: list[DriftObserver] = []
        # Called with the service label when its alarm rises (not on every alarmed score): the
        # diagnostics' drift explainer.
        self.on_alarm = on_alarm
        if metrics is not None:
            self._recent = Children(metrics.precision_recent, metrics.budget)
            self._baseline = Children(metrics.precision_baseline, metrics.budget)
            self._drift = Children(metrics.precision_drift, metrics.budget)

    def peer_score(self, score: PeerScore) -> None:
        """A score another replica made: the same step as one of ours, under the same capped label."""
        self.update(self.metrics.service(score.service) if self.metrics is not None else score.service, score.score)

    def update(self, service_label: str, score: float) -> bool:
        detector = self.detectors.get(service_label)
        if detector is None:
            detector = self.detectors[service_label] = DriftDetector(self.settings)
        was_alarmed = detector.alarmed
        alarmed = detector.update(score)
        if self.metrics is not None:
            self._recent(service_label).set(detector.recent)
            if detector.warmed_up:
                self._baseline(service_label).set(detector.baseline)
            self._drift(service_label).set(1 if alarmed else 0)
        for observe in self.observers:
            observe(service_label, detector)
        if alarmed and not was_alarmed and self.on_alarm is not None:
            self.on_alarm(service_label)
        return alarmed
