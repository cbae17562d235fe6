"""Confidence bands for a weighted mean of sampled scores, with the arithmetic of the recording
rules in deploy/prometheus/rules/ctxprec-confidence.yml (docs/STATISTICS.md).

Each score x taken at sample rate p carries the weight w = 1 / p. From the four sums the sidecar
exports as counters (w, w x, w x^2, w^2) over a window:

    mean   = sum(w x) / sum(w)                 the traffic's mean, not the sample's
    n_eff  = sum(w)^2 / sum(w^2)               Kish's effective sample size
    var    = sum(w x^2) / sum(w) - mean^2
    stderr = sqrt(var / (n_eff - 1))          var * n_eff / (n_eff - 1) is the unbiased spread
    band   = mean -/+ z * stderr, clamped to the score range [0, 1]

Prometheus computes these from the counters; this module is the same arithmetic for the
benchmark, the tests and anything in-process that wants the band without a Prometheus."""
from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.96


@dataclass(slots=True)
class WeightedSums:
    """Running sums over one window of scores on 0..1."""

    weight: float = 0.0
    weighted_sum: float = 0.0
    weighted_squares: float = 0.0
    weight_squares: float = 0.0

    def add(self, score: float, sample_rate: float) -> None:
        weight = 1.0 / sample_rate
        self.weight += weight
        self.weighted_sum += weight * score
        self.weighted_squares += weight * score * score
        self.weight_squares += weight * weight

    def merge(self, other: "WeightedSums") -> None:
        """Sums add across replicas and across adjacent windows."""
        self.weight += other.weight
        self.weighted_sum += other.weighted_sum
        self.weighted_squares += other.weighted_squares
        self.weight_squares += other.weight_squares

    def band(self, z: float = Z95) -> "Band | None":
        """The band, or None when the window has fewer than two effective scores (as the rules,
        which record no stderr or interval for n_eff <= 1)."""
        if self.weight <= 0.0 or self.weight_squares <= 0.0:
            return None
        mean = self.weighted_sum / self.weight
        n_eff = self.weight * self.weight / self.weight_squares
        if n_eff <= 1.0:
            return None
        variance = max(0.0, self.weighted_squares / self.weight - mean * mean)
        stderr = math.sqrt(variance / (n_eff - 1.0))
        return Band(mean=mean, stderr=stderr, n_eff=n_eff,
                    low=max(0.0, mean - z * stderr), high=min(1.0, mean + z * stderr))


@dataclass(frozen=True, slots=True)
class Band:
    mean: float
    stderr: float
    n_eff: float
    low: float
    high: float

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high
