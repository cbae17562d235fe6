"""Sampling that leans in when precision drifts (docs/STATISTICS.md).

At 1% a service yields a couple of scores a second, and a drift detector needs a few dozen scores
after a change to be sure of it. `AdaptiveSampler` wraps a `Sampler` and, per service, multiplies
its rates by `factor` (up to `max_rate`, never below the configured rate) while the service's
drift statistic is past `warning`, a fraction of the alarm threshold:

    base --statistic >= warning--> boosted --alarm held for confirm_scores--> hold
      ^                              |  \\--boosted for max_boost_s------------> hold
      |                              |                                          |
      +------statistic < warning-----+<------alarm cleared, statistic < warning-+

`hold` samples at the base rate until the detector settles, so that a confirmed drift does not
keep the judge at the boosted rate while the detector's baseline catches up.

The decision stays a threshold on the trace-id hash (sampler.py): a boosted rate is a higher
threshold, so it keeps every trace the base rate keeps, and every replica agrees on the base set.
The extra traces depend on this replica's detector.

Head and retrieval decisions are made at different times (the trace buffer waits for a trace to
complete), and the boost can start in between: a trace whose head decision was taken at the base
rate never reached the buffer if it was above that rate, so its retrieval must not be recorded
at the boosted rate. The sampler therefore remembers the head rate of the traces it kept while
boosted, and a retrieval's rate is never more than the head rate its trace was kept at. The rate
in `SampleDecision.rate` is thus the probability with which that retrieval was sampled: the
weight 1 / rate of the precision counters stays unbiased.
"""
from __future__ import annotations

import enum
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from ctxprec.collector.sampling.config import SamplingConfig
from ctxprec.collector.sampling.sampler import SampleDecision, Sampler, below_rate, rate_threshold, trace_hash

Clock = Callable[[], float]
RateListener = Callable[[str, float], None]
# Services tracked at most (each is a few dozen bytes); names beyond never boost. The usual key
# is the capped metrics label, which stays far below this.
MAX_TRACKED = 10_000


class DriftState(Protocol):
    """What the sampler reads from a drift detector (metrics/drift.py `DriftDetector`)."""

    @property
    def statistic(self) -> float: ...

    @property
    def alarmed(self) -> bool: ...


_DEFAULTS = SamplingConfig()  # the defaults are the sidecar's settings', declared in sampling/config.py


@dataclass(frozen=True, slots=True)
class AdaptiveSettings:
    enabled: bool = True  # constructing one is asking for it; the sidecar's switch is `sampling.adaptive`
    # Drift statistic (a fraction of the alarm threshold) that starts a boost. Low, because a
    # false start is cheap: at the boosted rate the statistic settles within a few dozen scores.
    warning: float = _DEFAULTS.adaptive_warning
    factor: float = _DEFAULTS.adaptive_factor
    max_rate: float = _DEFAULTS.adaptive_max_rate
    # Scores the alarm must hold, still boosted, before the rate returns to base: one flicker of
    # the alarm is not a confirmed drift.
    confirm_scores: int = _DEFAULTS.adaptive_confirm_scores
    # A boost that neither alarms nor falls back (a slow drift hovering at the warning level)
    # ends here, so the judge budget has a bound.
    max_boost_s: float = _DEFAULTS.adaptive_max_boost_s
    # Traces kept by a boosted head decision, remembered until their retrievals are decided.
    remembered_traces: int = 100_000

    def __post_init__(self) -> None:
        if not 0.0 < self.warning < 1.0:
            raise ValueError(f"warning: must be between 0 and 1 (a fraction of the alarm threshold), got {self.warning!r}")
        if self.factor < 1.0:
            raise ValueError(f"factor: must be >= 1, got {self.factor!r}")
        if not 0.0 < self.max_rate <= 1.0:
            raise ValueError(f"max_rate: must be in (0, 1], got {self.max_rate!r}")
        if self.confirm_scores < 1 or self.max_boost_s <= 0 or self.remembered_traces < 0:
            raise ValueError("confirm_scores, max_boost_s must be positive and remembered_traces >= 0")

    @classmethod
    def of(cls, config: SamplingConfig) -> "AdaptiveSettings":
        """From the `sampling` section of the sidecar's settings."""
        return cls(enabled=config.adaptive, warning=config.adaptive_warning, factor=config.adaptive_factor,
                   max_rate=config.adaptive_max_rate, confirm_scores=config.adaptive_confirm_scores,
                   max_boost_s=config.adaptive_max_boost_s)


class Phase(str, enum.Enum):
    BASE = "base"
    BOOSTED = "boosted"
    HOLD = "hold"


@dataclass(slots=True)
class ServiceBoost:
    phase: Phase = Phase.BASE
    since: float = 0.0  # when the phase began (clock seconds)
    alarmed_scores: int = 0  # consecutive alarmed scores while boosted
    service: str = ""  # the last service name seen under this key (its rules give the base rate)


def _same(service: str) -> str:
    return service


class AdaptiveSampler:
    """A `Sampler` with per-service boosts; `observe` is the drift monitor's hook.

    `key` maps a service name to the key the drift monitor uses (the capped metrics label), so
    that `observe(key, detector)` finds the service it belongs to."""

    def __init__(self, sampler: Sampler, settings: AdaptiveSettings | None = None, *,
                 key: Callable[[str], str] = _same, clock: Clock = time.monotonic) -> None:
        self.sampler = sampler
        self.settings = settings or AdaptiveSettings()
        self._key = key
        self._clock = clock
        self._boosts: dict[str, ServiceBoost] = {}
        self._kept: OrderedDict[int, float] = OrderedDict()  # trace hash -> head rate it was kept at
        self._listeners: list[RateListener] = []
        self._published: dict[str, float] = {}
        self.generation = 0  # +1 on every change of a published rate: caches of thresholds compare it
        # keep_trace runs for every trace id of every request: per service, the head rate and
        # whether it is boosted, valid while no service changed phase (`_phases` counts changes).
        self._phases = 0
        self._keep_cache: dict[str, tuple[int, float, int, bool]] = {}

    # -- the Sampler's interface --

    @property
    def default_rate(self) -> float:
        return self.sampler.default_rate

    def head_rate(self, service: str) -> float:
        base = self.sampler.head_rate(service)
        return self._boost(base) if self._boosting(service) else base

    def keep_trace(self, trace_id: bytes, service: str) -> bool:
        cached = self._keep_cache.get(service)
        if cached is None or cached[0] != self._phases:
            rate = self.head_rate(service)
            if len(self._keep_cache) >= MAX_TRACKED:
                self._keep_cache.clear()
            cached = self._keep_cache[service] = (self._phases, rate, rate_threshold(min(max(rate, 0.0), 1.0)),
                                                  rate > self.sampler.head_rate(service))
        _, rate, threshold, boosted = cached
        hashed = trace_hash(trace_id)
        if hashed >= threshold:  # below_rate, with the threshold computed once
            return False
        if boosted and self.settings.remembered_traces:
            self._remember(hashed, rate)
        return True

    def rate_for(self, service: str, attributes: Mapping[str, Any]) -> tuple[float, int | None]:
        rate, index = self.sampler.rate_for(service, attributes)
        return (self._boost(rate) if self._boosting(service) else rate), index

    def decide(self, trace_id: str | bytes, service: str, attributes: Mapping[str, Any]) -> SampleDecision:
        rate, index = self.rate_for(service, attributes)
        # Never claim more than the head decision let through (see the module docstring).
        head = self._kept.get(trace_hash(trace_id)) if self._kept else None
        rate = min(rate, head if head is not None else self.sampler.head_rate(service))
        return SampleDecision(below_rate(trace_id, rate), rate, index)

    # -- for the wiring: the gauge, the Kafka peek, the drift monitor --

    def rate(self, service: str) -> float:
        """The head rate in force for `service` now (what `ctxprec_sample_rate` shows)."""
        return self.head_rate(service)

    def phase(self, service: str) -> Phase:
        boost = self._boosts.get(self._key(service))
        return boost.phase if boost is not None else Phase.BASE

    def subscribe(self, listener: RateListener) -> None:
        """`listener(key, rate)` is called when a service is first seen and whenever its rate
        changes (the gauge). A cache of thresholds (the Kafka peek) must be dropped on every
        change, synchronously, or compare `generation` before each use: a head decision taken
        at a stale lower rate that the sampler does not know of would bias the weights."""
        self._listeners.append(listener)
        for key, rate in self._published.items():
            listener(key, rate)

    def observe(self, key: str, detector: DriftState) -> None:
        """The drift monitor's hook: called after each score of the service under `key`."""
        if not self.settings.enabled:
            return
        boost = self._boosts.get(key)
        if boost is None:
            if len(self._boosts) >= MAX_TRACKED:
                return
            boost = self._boosts[key] = ServiceBoost(service=key)
        s = self.settings
        statistic, alarmed = detector.statistic, detector.alarmed
        if boost.phase is Phase.BASE:
            if alarmed:
                # Already alarmed (the boost never started, or cleared and re-alarmed at once):
                # nothing left to find out by sampling more.
                self._enter(key, boost, Phase.HOLD)
            elif statistic >= s.warning:
                self._enter(key, boost, Phase.BOOSTED)
        elif boost.phase is Phase.BOOSTED:
            boost.alarmed_scores = boost.alarmed_scores + 1 if alarmed else 0
            if boost.alarmed_scores >= s.confirm_scores:
                self._enter(key, boost, Phase.HOLD)
            elif not alarmed and statistic < s.warning:
                self._enter(key, boost, Phase.BASE)
            elif self._clock() - boost.since >= s.max_boost_s:
                self._enter(key, boost, Phase.HOLD)
        elif not alarmed and statistic < s.warning:
            self._enter(key, boost, Phase.BASE)

    # -- internals --

    def _boost(self, rate: float) -> float:
        if rate <= 0.0:  # a rule's 0 excludes on purpose
            return rate
        return max(rate, min(self.settings.max_rate, rate * self.settings.factor))

    def _boosting(self, service: str) -> bool:
        key = self._key(service)
        boost = self._boosts.get(key)
        if boost is None:
            if len(self._boosts) >= MAX_TRACKED:
                return False
            boost = self._boosts[key] = ServiceBoost(service=service)
            self._publish(key, boost)
        elif boost.service != service:
            boost.service = service
        return boost.phase is Phase.BOOSTED

    def _enter(self, key: str, boost: ServiceBoost, phase: Phase) -> None:
        self._phases += 1
        boost.phase = phase
        boost.since = self._clock()
        boost.alarmed_scores = 0
        self._publish(key, boost)

    def _publish(self, key: str, boost: ServiceBoost) -> None:
        base = self.sampler.head_rate(boost.service)
        rate = self._boost(base) if boost.phase is Phase.BOOSTED else base
        if self._published.get(key) == rate:
            return
        self._published[key] = rate
        self.generation += 1
        for listener in self._listeners:
            listener(key, rate)

    def _remember(self, hashed: int, rate: float) -> None:
        kept = self._kept
        kept[hashed] = rate
        kept.move_to_end(hashed)
        while len(kept) > self.settings.remembered_traces:
            kept.popitem(last=False)
