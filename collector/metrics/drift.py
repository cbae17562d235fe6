"""Precision drift per service: one detector (scorer/drift.py, where the method and its story are
told) per capped service label, fed every score by the metrics sink (metrics/sink.py), mirrored
into the precision gauges, and its settings (YAML section `drift`)."""
from __future__ import annotations

import logging
import time
from typing import Annotated, Callable

from ctxprec.collector.components import Stateless
from ctxprec.collector.config_types import Count, Positive, Rate, setting
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import PeerScore
from ctxprec.scorer.drift import DriftDetector, DriftSettings
from pydantic import AfterValidator, BaseModel, ConfigDict

__all__ = ["DriftConfig", "DriftDetector", "DriftMonitor"]

log = logging.getLogger("ctxprec.drift")
_DEFAULT = DriftSettings()


def _above_zero(value: float) -> float:
    if value <= 0:
        raise ValueError(f"must be > 0, got {value!r}")
    return value


FractionAboveZero = Annotated[Rate, AfterValidator(_above_zero)]


class DriftConfig(BaseModel):
    """The drift detector (YAML section `drift`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    warmup: Count = setting(_DEFAULT.warmup, "scores per service that only estimate the baseline before any alarm")
    baseline_alpha: FractionAboveZero = setting(_DEFAULT.baseline_alpha,
                                                "weight of each new score in the slowly moving baseline")
    recent_alpha: FractionAboveZero = setting(_DEFAULT.recent_alpha, "weight of each new score in the recent mean")
    batch: Count = setting(_DEFAULT.batch, "scores averaged per detector step")
    slack: Positive = setting(_DEFAULT.slack, "allowance k, in spreads of a block mean")
    threshold: Positive = setting(_DEFAULT.threshold, "alarm level h, in spreads of a block mean")
    clear_ratio: FractionAboveZero = setting(_DEFAULT.clear_ratio,
                                             "the alarm clears when both sums fall below threshold x this")
    min_sigma: Positive = setting(_DEFAULT.min_sigma, "floor of the estimated spread of scores")

    def detector_settings(self) -> DriftSettings:
        return DriftSettings(**self.model_dump())


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
        self.settings = (settings or DriftConfig()).detector_settings()
        self.detectors: dict[str, DriftDetector] = {}
        self.observers: list[DriftObserver] = []
        # Called with the service label when its alarm rises (not on every alarmed score): the
        # diagnostics' drift explainer, which logs the drift with the slices behind it. Without
        # one the monitor logs the drift itself.
        self.on_alarm = on_alarm
        # The judge canary's note for an alarm raised at a time (collector/canary/watch.py): the
        # words saying the judge changed within the window of it, or None.
        self.judge_note: Callable[[float], str | None] | None = None
        if metrics is not None:
            self._recent = Children(metrics.precision_recent, metrics.budget)
            self._baseline = Children(metrics.precision_baseline, metrics.budget)
            self._drift = Children(metrics.precision_drift, metrics.budget)

    def alarmed_services(self) -> list[str]:
        return sorted(service for service, detector in self.detectors.items() if detector.alarmed)

    def new_baseline(self, why: str) -> None:
        """Every service's detector starts again (warm-up, then a new baseline): what a new judge
        fingerprint means, since its scores are on another scale; not a drift."""
        services = list(self.detectors)
        self.detectors.clear()
        if self.metrics is not None:
            for service in services:
                self._drift(service).set(0)
        log.info("precision drift baselines of %d services start again: %s", len(services), why)

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
        if alarmed and not was_alarmed:
            if self.on_alarm is not None:
                self.on_alarm(service_label)
            elif detector.drift is not None:
                note = self.judge_note(time.time()) if self.judge_note is not None else None
                log.warning("%s%s", detector.drift.words(service_label), f"; {note}" if note else "")
        elif was_alarmed and not alarmed and detector.ended is not None:
            log.info("%s", detector.ended.words(service_label))
        return alarmed
