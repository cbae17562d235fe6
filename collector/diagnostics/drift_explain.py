"""Which slice dropped: when the drift detector alarms for a service, split the change of its mean
score between retrievers, and between the values of each configured attribute.

For one dimension (the retrievers, or the values of one attribute) with values s, baseline and
recent traffic shares wb_s, wr_s and mean scores mb_s, mr_s, and service means Mb, Mr:

    Mr - Mb = sum_s [ wr_s * (mr_s - mb_s)  +  (wr_s - wb_s) * (mb_s - Mb) ]
                      \\_ within: the slice's    \\_ mix: traffic moving towards a slice that
                         own change, weighted       scores below the service's baseline (or
                         by its recent traffic      away from one above it)

A slice's contribution is the sum of both; the contributions of a dimension add up to the whole
change. A slice with too little baseline traffic for a mean of its own is measured against the
service's baseline mean. A slice that is new since the baseline (a fresh index version) soon has
a baseline of its own made of its recent scores, so its own change reads near zero and it shows
up through the mix term instead: it took traffic, and it scores low.

Culprits, per dimension, are the fewest values that carry at least 60% of whichever term carries
more of the change:

- within (a slice got worse): only if those values carry at least 20 points more of it than of
  the recent traffic (a drop spread over every tenant tier as their traffic is names no tier), and
  their own change stands out from the rest's by at least 2 standard errors (a handful of low
  scores can land in one tier by chance);
- mix (traffic moved): only if at least 10% of the traffic moved between values.

A service with one retriever names it.

The head of the explanation, the levels before and after and the change, is the drift detector's
(scorer/drift.py): the baseline frozen at the level before the drift, the recent level, the change
between the two as printed, so that the log line, `/diagnostics/drift`, the metrics and the demo
say the same. The shares split the change of the slices' own decayed means (`decomposed`), which
follow the detector's levels closely but are not the same numbers."""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ctxprec.collector.diagnostics.slices import ServiceSnapshot, SliceStats, SliceTracker
from ctxprec.scorer.drift import Drift, DriftDetector, no_drift_words

log = logging.getLogger("ctxprec.diagnostics.drift")

MIN_BASELINE_WEIGHT = 5.0  # decayed scores a slice needs before its own baseline mean is used
MIN_SPREAD = 0.05  # floor of the per-score spread, as in the drift detector
MOST_OF_THE_CHANGE = 0.6
BEYOND_TRAFFIC = 0.2
STANDARD_ERRORS = 2.0
MIN_TRAFFIC_MOVED = 0.1
NO_CHANGE = 0.001  # on the 0..1 score scale: below this, recent and baseline are the same


@dataclass(frozen=True, slots=True)
class SliceShare:
    value: str
    traffic_share: float  # recent
    baseline_traffic_share: float
    recent_mean: float | None  # None: no recent traffic
    baseline_mean: float | None  # None: too little baseline traffic for a mean of its own
    within: float
    mix: float
    share_of_change: float  # (within + mix) / the dimension's total

    @property
    def contribution(self) -> float:
        return self.within + self.mix

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "traffic_share": _r(self.traffic_share),
            "baseline_traffic_share": _r(self.baseline_traffic_share),
            "recent_mean": None if self.recent_mean is None else _r(self.recent_mean),
            "baseline_mean": None if self.baseline_mean is None else _r(self.baseline_mean),
            "contribution": _r(self.contribution),
            "within": _r(self.within),
            "mix": _r(self.mix),
            "share_of_change": _r(self.share_of_change),
        }


@dataclass(frozen=True, slots=True)
class Dimension:
    name: str  # "retriever" or the attribute key
    named: list[str]  # the culprits, most contributing first; empty when nothing stands out
    driver: str  # "within" or "mix": which term carries more of the change
    slices: list[SliceShare]  # every value, most contributing first

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "named": list(self.named), "driver": self.driver,
                "slices": [s.to_dict() for s in self.slices]}


@dataclass(frozen=True, slots=True)
class Levels:
    """The drift detector's view of a service when the explanation was made."""

    alarmed: bool
    baseline: float | None  # None while the detector warms up
    recent: float

    @classmethod
    def of(cls, detector: DriftDetector) -> "Levels":
        return cls(detector.alarmed, detector.baseline if detector.warmed_up else None, detector.recent)

    @property
    def drift(self) -> Drift | None:
        return Drift(self.baseline, self.recent) if self.alarmed and self.baseline is not None else None


@dataclass(frozen=True, slots=True)
class DriftExplanation:
    service: str
    at: float  # unix seconds
    scores: int  # scores of the service seen so far
    baseline_mean: float  # the slices' own decayed means, whose change the shares split
    recent_mean: float
    change: float  # recent - baseline, of the slices' means
    retriever: Dimension
    attributes: list[Dimension] = field(default_factory=list)
    levels: Levels | None = None  # the drift detector's, when it was asked

    @property
    def drift(self) -> Drift | None:
        return self.levels.drift if self.levels is not None else None

    @property
    def direction(self) -> str | None:
        """`drop` or `rise` while there is a drift; None otherwise."""
        if self.levels is None:
            return "drop" if self.change < 0 else "rise"
        drift = self.drift
        return drift.direction if drift is not None else None

    def message(self) -> str:
        """One log line: the drift as the detector sees it, then the slices behind it."""
        drift = self.drift
        if self.levels is not None and drift is None:
            return no_drift_words(self.service, self.levels.baseline, self.levels.recent)
        if drift is not None:
            head = drift.words(self.service)
        else:
            head = f"service {self.service!r}: mean {self.baseline_mean:.2f} -> {self.recent_mean:.2f}"
        if abs(self.change) < NO_CHANGE:
            return head + "; recent and baseline means do not differ yet"
        parts = [_describe(self.retriever)] + [_describe(d) for d in self.attributes]
        return head + "; " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        levels, drift = self.levels, self.drift
        before = levels.baseline if levels is not None else self.baseline_mean
        after = levels.recent if levels is not None else self.recent_mean
        return {
            "service": self.service,
            "at": round(self.at, 3),
            "scores": self.scores,
            "alarmed": levels.alarmed if levels is not None else None,
            "direction": self.direction,
            # The detector's levels unrounded, so that rounding them to two decimals, as every
            # place prints them, gives `change`.
            "baseline_mean": before,
            "recent_mean": after,
            "change": drift.change if drift is not None else (None if before is None else _r(after - before)),
            "decomposed": {"baseline_mean": _r(self.baseline_mean), "recent_mean": _r(self.recent_mean),
                           "change": _r(self.change)},
            "retriever": self.retriever.to_dict(),
            "attributes": [d.to_dict() for d in self.attributes],
            "message": self.message(),
        }


def explain(snapshot: ServiceSnapshot, *, at: float | None = None,
            detector: DriftDetector | None = None) -> DriftExplanation | None:
    """The decomposition of a service's change, headed by its drift detector's levels when given;
    None before it has recent and baseline scores."""
    total = snapshot.total
    if total.base_n <= 0 or total.recent_n <= 0:
        return None
    baseline_mean = total.base_sum / total.base_n
    recent_mean = total.recent_sum / total.recent_n
    change = recent_mean - baseline_mean
    retriever = _dimension("retriever", snapshot.retrievers, change, single_is_named=True)
    attributes = [_dimension(key, slices, change) for key, slices in snapshot.attributes.items()]
    return DriftExplanation(snapshot.service, time.time() if at is None else at, snapshot.scores, baseline_mean,
                            recent_mean, change, retriever, attributes,
                            Levels.of(detector) if detector is not None else None)


def _dimension(name: str, slices: list[SliceStats], change: float, *, single_is_named: bool = False) -> Dimension:
    base_total = sum(s.base_n for s in slices)
    recent_total = sum(s.recent_n for s in slices)
    if base_total <= 0 or recent_total <= 0:
        return Dimension(name, [], "within", [])
    service_base = sum(s.base_sum for s in slices) / base_total
    parts: list[tuple[str, float, float, float | None, float | None, float, float]] = []
    for s in slices:
        wb, wr = s.base_n / base_total, s.recent_n / recent_total
        own_base = s.base_sum / s.base_n if s.base_n >= MIN_BASELINE_WEIGHT else None
        mb = service_base if own_base is None else own_base
        mr = s.recent_sum / s.recent_n if s.recent_n > 0 else None
        within = wr * ((mb if mr is None else mr) - mb)
        mix = (wr - wb) * (mb - service_base)
        parts.append((s.value, wr, wb, mr, own_base, within, mix))
    explained = sum(p[5] + p[6] for p in parts)
    meaningful = abs(change) >= NO_CHANGE and abs(explained) > 1e-12
    shares = [SliceShare(value, wr, wb, mr, own_base, within, mix,
                         (within + mix) / explained if meaningful else 0.0)
              for value, wr, wb, mr, own_base, within, mix in parts]
    shares.sort(key=lambda x: (-x.share_of_change, x.value))
    total_within = sum(s.within for s in shares)
    total_mix = sum(s.mix for s in shares)
    driver = "mix" if abs(total_mix) > abs(total_within) else "within"
    with_traffic = [s for s in shares if s.traffic_share > 0]
    if single_is_named and len(with_traffic) == 1:
        return Dimension(name, [with_traffic[0].value], driver, shares)
    if not meaningful:
        return Dimension(name, [], driver, shares)
    if driver == "within":
        named = _fewest_carrying(shares, total_within, lambda s: s.within)
        if named:
            carried = sum(s.within for s in shares if s.value in named) / total_within
            traffic = sum(s.traffic_share for s in shares if s.value in named)
            if carried - traffic < BEYOND_TRAFFIC or not _stands_out(slices, named, service_base, change):
                named = []
    else:
        moved = sum(abs(s.traffic_share - s.baseline_traffic_share) for s in shares) / 2
        named = _fewest_carrying(shares, total_mix, lambda s: s.mix) if moved >= MIN_TRAFFIC_MOVED else []
    return Dimension(name, named, driver, shares)


def _fewest_carrying(shares: list[SliceShare], total: float, term: Callable[[SliceShare], float]) -> list[str]:
    """The fewest values whose `term` adds up to MOST_OF_THE_CHANGE of `total` (same sign)."""
    if total == 0:
        return []
    ranked = sorted(shares, key=lambda s: (-term(s) / total, s.value))
    carried = 0.0
    chosen: list[str] = []
    for s in ranked:
        part = term(s) / total
        if part <= 0:
            break
        chosen.append(s.value)
        carried += part
        if carried >= MOST_OF_THE_CHANGE:
            return chosen
    return []


def _stands_out(slices: list[SliceStats], named: list[str], service_base: float, change: float) -> bool:
    """Whether the named slices changed more than the rest, in the change's direction, by at least
    STANDARD_ERRORS standard errors; recent decayed counts stand in for sample sizes, the spread
    of single scores at baseline for their standard deviation."""
    chosen = [s for s in slices if s.value in named]
    rest = [s for s in slices if s.value not in named]
    base_total = sum(s.base_n for s in slices)
    variance = sum(s.base_sq for s in slices) / base_total - service_base * service_base
    spread = max(MIN_SPREAD, math.sqrt(max(0.0, variance)))

    def shift(group: list[SliceStats]) -> tuple[float, float]:
        n = sum(s.recent_n for s in group)
        if n <= 0:
            return 0.0, 0.0
        base_n = sum(s.base_n for s in group)
        base = sum(s.base_sum for s in group) / base_n if base_n >= MIN_BASELINE_WEIGHT else service_base
        return sum(s.recent_sum for s in group) / n - base, n

    d_chosen, n_chosen = shift(chosen)
    d_rest, n_rest = shift(rest)
    if n_chosen <= 0:
        return False
    error = spread * math.sqrt(1.0 / n_chosen + (1.0 / n_rest if n_rest > 0 else 0.0))
    return (d_chosen - d_rest) * (1.0 if change > 0 else -1.0) >= STANDARD_ERRORS * error


def _describe(dimension: Dimension) -> str:
    label = dimension.name
    if not dimension.slices:
        return f"{label}: no traffic"
    if not dimension.named:
        top = dimension.slices[0]
        return f"{label}: no value stands out (largest {top.value}, {top.share_of_change:.0%} of the change)"
    named = [s for s in dimension.slices if s.value in dimension.named]
    carried = sum(s.share_of_change for s in named)
    traffic = sum(s.traffic_share for s in named)
    before = sum(s.baseline_traffic_share for s in named)
    values = ",".join(s.value for s in named)
    prefix = f"retriever {values}" if label == "retriever" else f"{label}={values}"
    moved = f", {before:.0%} before" if dimension.driver == "mix" else ""
    return f"{prefix}: {carried:.0%} of the change ({traffic:.0%} of traffic{moved})"


class DriftExplainer:
    """The hook the drift monitor calls with a service's label when its alarm rises: explains the
    change from the slices, logs it in one line and keeps it for `/diagnostics/drift`. One
    explanation per service is kept (services are capped), replaced at the next alarm."""

    def __init__(self, slices: SliceTracker, *, logger: logging.Logger | None = None,
                 clock: Callable[[], float] = time.time,
                 detector: Callable[[str], DriftDetector | None] | None = None) -> None:
        """`detector(service)` is the service's drift detector, whose levels head every
        explanation."""
        self.slices = slices
        self._log = logger or log
        self._clock = clock
        self._detector = detector or (lambda service: None)
        self._at_alarm: dict[str, DriftExplanation] = {}
        # The judge canary's note for an alarm raised at a time (collector/canary/watch.py).
        self.judge_note: Callable[[float], str | None] | None = None

    def __call__(self, service: str) -> None:
        # Runs inside the metrics sink's emit: a failure here must not cost the score its metrics.
        try:
            explanation = self.current(service)
            if explanation is None:
                detector = self._detector(service)
                drift = detector.drift if detector is not None else None
                head = drift.words(service) if drift is not None else f"precision drift in service {service!r}"
                self._log.warning("%s; no slice statistics yet%s", head, self._judge_tail())
                return
            self._at_alarm[service] = explanation
            self._log.warning("%s%s", explanation.message(), self._judge_tail(explanation.at))
        except Exception:
            self._log.exception("explaining the drift of service %r failed", service)

    def _judge_tail(self, at: float | None = None) -> str:
        note = self.judge_note(self._clock() if at is None else at) if self.judge_note is not None else None
        return f"; {note}" if note else ""

    def current(self, service: str) -> DriftExplanation | None:
        """The decomposition as of now (whether or not the service is alarmed)."""
        snapshot = self.slices.snapshot(service)
        return None if snapshot is None else explain(snapshot, at=self._clock(), detector=self._detector(service))

    def at_alarm(self, service: str) -> DriftExplanation | None:
        return self._at_alarm.get(service)


def _r(value: float) -> float:
    return round(value, 4)
