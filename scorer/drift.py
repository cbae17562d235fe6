"""Precision drift: a sequential change detector on a stream of scores (one per service in the
sidecar, collector/metrics/drift.py; over the score records in `ctxprec report`), and the one way a
drift is told, wherever it is printed.

The detector is a two-sided CUSUM on the normalised score stream, measured against a slowly
moving EWMA level:

- warm-up: the first `warmup` scores only estimate the level and spread (no alarm);
- then scores are averaged in blocks of `batch` (single MAP scores are far from normal: mostly
  1.0 with a heavy tail of zeros; block means behave) and each block mean m adds
  (level - m) - k to the "down" sum and (m - level) - k to the "up" sum (both floored at 0),
  with k = `slack` spreads of a block mean; the alarm rises when a sum passes h = `threshold`
  spreads;
- hysteresis: once alarmed, it clears only when both sums fall below h * `clear_ratio`. The sums
  are capped at 2h so that a long alarm can clear in bounded time;
- the level keeps moving (EWMA, `baseline_alpha`), slowly, so a lasting new level becomes the new
  normal after a few hundred scores and the alarm then clears.

What the detector calls its **baseline** is that level, except while an alarm is raised: then it
is frozen at the level the service had before the drift began (the level when the sum that
alarmed last stood at zero: the start of the change, not the moment the alarm rose, by which
time the moving level has already followed the drop part of the way). Its **recent** level is an
EWMA of the last scores (`recent_alpha`), except while an alarm is raised: then it is the mean of
every score since that start, which firms up as the alarm lasts instead of wandering with the
last few scores. So for as long as the alarm lasts, "before" is the level before the drift,
"after" the level since, and the drop the difference. When the alarm clears, both go back to
the moving level and the EWMA: either precision came back (a recovery), or the level has moved to
the new precision (the baseline *adapted*: a new normal, not a recovery).

Scores are noisy per retrieval (MAP over a handful of contexts), so the spread is estimated and
floored at `min_sigma`: k and h scale with it and the false-alarm rate stays low on stable data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DriftSettings:
    """The detector's tuning (the sidecar's YAML section `drift` declares each with its meaning)."""

    warmup: int = 100
    baseline_alpha: float = 0.005
    recent_alpha: float = 0.1
    batch: int = 8
    slack: float = 0.75
    threshold: float = 8.0
    clear_ratio: float = 0.25
    min_sigma: float = 0.05


@dataclass(frozen=True, slots=True)
class Drift:
    """A drift as every place prints it (logs, the demo, /diagnostics/drift, the report; the
    alert rule's annotation computes the same from the gauges): the level before, the level after
    and the change between them, each to two decimals, the change taken between the two printed
    levels so that the three always add up as read."""

    before: float  # the baseline: the level before the drift began
    after: float  # the recent level

    @property
    def change(self) -> float:
        return round(round(self.after, 2) - round(self.before, 2), 2)

    @property
    def direction(self) -> str:
        return "rise" if self.change > 0 else "drop"

    def levels(self) -> str:
        """`0.91 -> 0.44 (drop 0.47)`."""
        return f"{self.before:.2f} -> {self.after:.2f} ({self.direction} {abs(self.change):.2f})"

    def words(self, service: str) -> str:
        return f"precision drift in service {service!r}: {self.levels()}"


@dataclass(frozen=True, slots=True)
class DriftEnd:
    """An alarm that cleared: whether precision came back or the baseline moved to it."""

    drift: Drift  # the level before the drift and the level since, when the alarm cleared
    baseline: float  # the baseline from now on
    recent: float  # the last scores' level when it cleared

    @property
    def adapted(self) -> bool:
        """The new level became the baseline: precision now is nearer the new baseline than the
        level before the drift."""
        return abs(self.recent - self.drift.before) > abs(self.recent - self.baseline)

    def outcome(self) -> str:
        if self.adapted:
            return (f"the baseline adapted to {self.baseline:.2f} (it was {self.drift.before:.2f} before the drift): "
                    "a new normal, not a recovery")
        return f"precision is back to {self.recent:.2f} (baseline {self.baseline:.2f})"

    def words(self, service: str) -> str:
        return f"precision drift in service {service!r} ended: {self.outcome()}"


def no_drift_words(service: str, baseline: float | None, recent: float | None) -> str:
    """What a service without an alarm is said to be (never "drift")."""
    if baseline is None:
        return f"no drift in service {service!r}: the detector is still learning its baseline"
    now = f"precision {recent:.2f}, " if recent is not None else ""
    return f"no drift in service {service!r}: {now}baseline {baseline:.2f}"


class DriftDetector:
    def __init__(self, settings: DriftSettings | None = None) -> None:
        self.settings = settings or DriftSettings()
        self.count = 0
        self.level = 0.0  # the moving EWMA level the sums are taken against
        self.variance = 0.0
        self.ewma = 0.0  # the last scores' level
        self.down = 0.0
        self.up = 0.0
        self.alarmed = False
        self.frozen: float | None = None  # the baseline while an alarm is raised
        self.ended: DriftEnd | None = None  # how the last alarm cleared
        self._down_start = 0.0  # the level when each sum last stood at zero
        self._up_start = 0.0
        self._down_since = (0.0, 0)  # sum and count of the scores since then, block by block
        self._up_since = (0.0, 0)
        self._alarm_sum = 0.0  # the scores since the start of the drift an alarm stands for
        self._alarm_n = 0
        self._m2 = 0.0  # Welford sum of squares during warm-up
        self._block_sum = 0.0
        self._block_n = 0

    @property
    def baseline(self) -> float:
        """The level an alarm is measured against: frozen before the drift while it is raised."""
        return self.level if self.frozen is None else self.frozen

    @property
    def recent(self) -> float:
        """The recent level: while an alarm is raised, the mean since the drift began."""
        if self.alarmed and self._alarm_n:
            return self._alarm_sum / self._alarm_n
        return self.ewma

    @property
    def sigma(self) -> float:
        return max(self.settings.min_sigma, math.sqrt(max(0.0, self.variance)))

    @property
    def warmed_up(self) -> bool:
        return self.count >= self.settings.warmup

    @property
    def drift(self) -> Drift | None:
        """The drift while the alarm is raised, else None."""
        return Drift(self.baseline, self.recent) if self.alarmed else None

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
            self.ewma = x
        else:
            self.ewma += s.recent_alpha * (x - self.ewma)
        if self.count <= s.warmup:
            delta = x - self.level
            self.level += delta / self.count
            self._m2 += delta * (x - self.level)
            self.variance = self._m2 / self.count
            self._down_start = self._up_start = self.level
            return False

        deviation = x - self.level
        was_alarmed = self.alarmed
        self._block_sum += x
        self._block_n += 1
        if self._block_n >= s.batch:
            block = (self._block_sum, self._block_n)
            self._block_sum, self._block_n = 0.0, 0
            self._step(block, self.sigma / math.sqrt(s.batch))
        if was_alarmed and self.alarmed:
            self._alarm_sum += x
            self._alarm_n += 1
        self.level += s.baseline_alpha * deviation
        self.variance += s.baseline_alpha * (deviation * deviation - self.variance)
        return self.alarmed

    def _step(self, block: tuple[float, int], sigma: float) -> None:
        s = self.settings
        k, h = s.slack * sigma, s.threshold * sigma
        deviation = block[0] / block[1] - self.level
        self.down = min(2 * h, max(0.0, self.down - deviation - k))
        self.up = min(2 * h, max(0.0, self.up + deviation - k))
        # Where each sum last stood at zero is where a change it goes on to alarm about began.
        if self.down == 0.0:
            self._down_start, self._down_since = self.level, (0.0, 0)
        else:
            self._down_since = (self._down_since[0] + block[0], self._down_since[1] + block[1])
        if self.up == 0.0:
            self._up_start, self._up_since = self.level, (0.0, 0)
        else:
            self._up_since = (self._up_since[0] + block[0], self._up_since[1] + block[1])
        if not self.alarmed and (self.down > h or self.up > h):
            down = self.down > h
            self.alarmed = True
            self.frozen = self._down_start if down else self._up_start
            self._alarm_sum, self._alarm_n = self._down_since if down else self._up_since
            self.ended = None
        elif self.alarmed and self.down < h * s.clear_ratio and self.up < h * s.clear_ratio:
            self.ended = DriftEnd(Drift(self.baseline, self.recent), self.level, self.ewma)
            self.alarmed = False
            self.frozen = None
