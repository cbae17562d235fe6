"""Score statistics per slice of a service's traffic, recent and baseline, for explaining drift.

A slice is a retriever, or one value of a configured span attribute (`index.version`,
`tenant.tier`, ...). Each slice keeps exponentially decayed counts and score sums at two time
scales, measured in scores of its service: a recent one (half-life `recent_half_life`, default 50
scores, about as fast as the drift detector reacts) and a baseline one (half-life
`baseline_half_life`, default 1,000). Decay is applied lazily, when a slice is next touched or
read, so a score costs O(1 + number of attributes) whatever the number of slices.

Memory is bounded: services and retrievers arrive capped by the caller (the metrics' label caps),
at most `max_attributes` attributes are configured, and each attribute tracks at most
`max_values` values per service. A new value beyond that takes the place of a value whose
baseline weight has decayed below half a score (one not seen for many baseline half-lives, such
as an index version long retired); if there is none, it is counted under `other`. Attributes
missing from a retrieval count under `(unset)`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

DEFAULT_MAX_VALUES = 20
MAX_ATTRIBUTES = 10
DEFAULT_RECENT_HALF_LIFE = 50.0
DEFAULT_BASELINE_HALF_LIFE = 1000.0
OTHER = "other"
UNSET = "(unset)"
MAX_VALUE_CHARS = 64
_STALE_WEIGHT = 0.5
# After a scan for a stale value finds none, unknown values go to `other` without scanning again
# for this many scores: a high-cardinality attribute would otherwise pay a scan per score.
_RESCAN_AFTER = 200


class Decayed:
    """Decayed count and score sum of one slice at both time scales, as of service tick `tick`."""

    __slots__ = ("recent_n", "recent_sum", "base_n", "base_sum", "base_sq", "tick")

    def __init__(self, tick: int) -> None:
        self.recent_n = 0.0
        self.recent_sum = 0.0
        self.base_n = 0.0
        self.base_sum = 0.0
        self.base_sq = 0.0  # sum of squared scores: the spread that tells a real drop from noise
        self.tick = tick


@dataclass(frozen=True, slots=True)
class SliceStats:
    """A slice's decayed statistics as of the read."""

    value: str
    recent_n: float
    recent_sum: float
    base_n: float
    base_sum: float
    base_sq: float = 0.0


@dataclass(frozen=True, slots=True)
class ServiceSnapshot:
    service: str
    scores: int  # scores seen for the service
    total: SliceStats
    retrievers: list[SliceStats]
    attributes: dict[str, list[SliceStats]] = field(default_factory=dict)


class _Service:
    __slots__ = ("tick", "total", "retrievers", "values", "rescan_at")

    def __init__(self, attributes: Sequence[str]) -> None:
        self.tick = 0
        self.total = Decayed(0)
        self.retrievers: dict[str, Decayed] = {}
        self.values: dict[str, dict[str, Decayed]] = {key: {} for key in attributes}
        self.rescan_at: dict[str, int] = {key: 0 for key in attributes}


class SliceTracker:
    def __init__(self, attributes: Sequence[str] = (), *, max_values: int = DEFAULT_MAX_VALUES,
                 recent_half_life: float = DEFAULT_RECENT_HALF_LIFE,
                 baseline_half_life: float = DEFAULT_BASELINE_HALF_LIFE) -> None:
        keys = list(dict.fromkeys(attributes))
        if len(keys) > MAX_ATTRIBUTES:
            raise ValueError(f"at most {MAX_ATTRIBUTES} slice attributes, got {len(keys)}")
        if max_values < 1:
            raise ValueError(f"max_values must be >= 1, got {max_values}")
        if not 0 < recent_half_life < baseline_half_life:
            raise ValueError("need 0 < recent_half_life < baseline_half_life, "
                             f"got {recent_half_life!r} and {baseline_half_life!r}")
        self.attributes: tuple[str, ...] = tuple(keys)
        self.max_values = max_values
        self.recent_half_life = recent_half_life
        self.baseline_half_life = baseline_half_life
        self._recent_decay = 0.5 ** (1.0 / recent_half_life)
        self._base_decay = 0.5 ** (1.0 / baseline_half_life)
        self._services: dict[str, _Service] = {}

    def services(self) -> list[str]:
        return sorted(self._services)

    def observe(self, service: str, retriever: str, score: float, attributes: Mapping[str, Any],
                resource: Mapping[str, Any] | None = None) -> None:
        """One score (0..1) of `service` through `retriever`; slice values are read from the
        retrieval's span attributes, then its resource's."""
        state = self._services.get(service)
        if state is None:
            state = self._services[service] = _Service(self.attributes)
        state.tick += 1
        tick = state.tick
        self._add(state.total, tick, score)
        slot = state.retrievers.get(retriever)
        if slot is None:
            slot = state.retrievers[retriever] = Decayed(tick)
        self._add(slot, tick, score)
        for key in self.attributes:
            raw = attributes.get(key)
            if raw is None and resource:
                raw = resource.get(key)
            self._add(self._value_slot(state, key, _value_text(raw), tick), tick, score)

    def _add(self, slot: Decayed, tick: int, score: float) -> None:
        elapsed = tick - slot.tick
        if elapsed:
            r = self._recent_decay ** elapsed
            b = self._base_decay ** elapsed
            slot.recent_n *= r
            slot.recent_sum *= r
            slot.base_n *= b
            slot.base_sum *= b
            slot.base_sq *= b
            slot.tick = tick
        slot.recent_n += 1.0
        slot.recent_sum += score
        slot.base_n += 1.0
        slot.base_sum += score
        slot.base_sq += score * score

    def _value_slot(self, state: _Service, key: str, value: str, tick: int) -> Decayed:
        values = state.values[key]
        slot = values.get(value)
        if slot is not None:
            return slot
        special = value in (UNSET, OTHER)
        tracked = len(values) - (UNSET in values) - (OTHER in values)
        if special or tracked < self.max_values:
            slot = values[value] = Decayed(tick)
            return slot
        if tick >= state.rescan_at[key]:
            stale = self._stale(values, tick)
            if stale is not None:
                del values[stale]
                slot = values[value] = Decayed(tick)
                return slot
            state.rescan_at[key] = tick + _RESCAN_AFTER
        slot = values.get(OTHER)
        if slot is None:
            slot = values[OTHER] = Decayed(tick)
        return slot

    def _stale(self, values: dict[str, Decayed], tick: int) -> str | None:
        for value, slot in values.items():
            if value in (UNSET, OTHER):
                continue
            if slot.base_n * self._base_decay ** (tick - slot.tick) < _STALE_WEIGHT:
                return value
        return None

    def snapshot(self, service: str) -> ServiceSnapshot | None:
        """Every slice of `service`, decayed to its latest score. Reading changes nothing."""
        state = self._services.get(service)
        if state is None:
            return None
        tick = state.tick
        return ServiceSnapshot(
            service=service,
            scores=tick,
            total=self._read(state.total, "", tick),
            retrievers=[self._read(slot, name, tick) for name, slot in state.retrievers.items()],
            attributes={key: [self._read(slot, value, tick) for value, slot in values.items()]
                        for key, values in state.values.items()},
        )

    def _read(self, slot: Decayed, value: str, tick: int) -> SliceStats:
        elapsed = tick - slot.tick
        r = self._recent_decay ** elapsed
        b = self._base_decay ** elapsed
        return SliceStats(value, slot.recent_n * r, slot.recent_sum * r, slot.base_n * b, slot.base_sum * b,
                          slot.base_sq * b)


def _value_text(raw: Any) -> str:
    if raw is None or raw == "":
        return UNSET
    if isinstance(raw, bool):
        return "true" if raw else "false"
    text = str(raw)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS]
