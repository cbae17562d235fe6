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
_RENORMALIZE = 1e100


class Decayed:
    """One slice's decayed count, score sum (both time scales) and sum of squared scores
    (baseline), stored inflated: each score is added with its service's current weight, which
    grows by 1/decay per score, so nothing is decayed on update; reading divides by the weight."""

    __slots__ = ("recent_n", "recent_sum", "base_n", "base_sum", "base_sq")

    def __init__(self) -> None:
        self.recent_n = 0.0
        self.recent_sum = 0.0
        self.base_n = 0.0
        self.base_sum = 0.0
        self.base_sq = 0.0  # the spread that tells a real drop from noise


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
    __slots__ = ("tick", "recent_weight", "base_weight", "total", "retrievers", "values", "rescan_at")

    def __init__(self, attributes: Sequence[str]) -> None:
        self.tick = 0
        self.recent_weight = 1.0
        self.base_weight = 1.0
        self.total = Decayed()
        self.retrievers: dict[str, Decayed] = {}
        self.values: dict[str, dict[str, Decayed]] = {key: {} for key in attributes}
        self.rescan_at: dict[str, int] = {key: 0 for key in attributes}

    def slots(self) -> list[Decayed]:
        return [self.total, *self.retrievers.values(), *(slot for values in self.values.values() for slot in values.values())]


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
        # Per score, a service's weights grow by these factors (1 / the decay per score).
        self._recent_growth = 2.0 ** (1.0 / recent_half_life)
        self._base_growth = 2.0 ** (1.0 / baseline_half_life)
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
        recent = state.recent_weight = state.recent_weight * self._recent_growth
        base = state.base_weight = state.base_weight * self._base_growth
        if base > _RENORMALIZE or recent > _RENORMALIZE:
            self._renormalize(state)
            recent, base = state.recent_weight, state.base_weight
        slot = state.retrievers.get(retriever)
        if slot is None:
            slot = state.retrievers[retriever] = Decayed()
        touched = [state.total, slot]
        for key in self.attributes:
            raw = attributes.get(key)
            if raw is None and resource:
                raw = resource.get(key)
            touched.append(self._value_slot(state, key, _value_text(raw)))
        recent_score = recent * score
        base_score = base * score
        base_square = base_score * score
        for slot in touched:
            slot.recent_n += recent
            slot.recent_sum += recent_score
            slot.base_n += base
            slot.base_sum += base_score
            slot.base_sq += base_square

    def _renormalize(self, state: _Service) -> None:
        """Divide the stored sums by the weights and restart the weights at 1, long before floats
        could overflow (a weight doubles every half-life)."""
        r, b = 1.0 / state.recent_weight, 1.0 / state.base_weight
        for slot in state.slots():
            slot.recent_n *= r
            slot.recent_sum *= r
            slot.base_n *= b
            slot.base_sum *= b
            slot.base_sq *= b
        state.recent_weight = state.base_weight = 1.0

    def _value_slot(self, state: _Service, key: str, value: str) -> Decayed:
        values = state.values[key]
        slot = values.get(value)
        if slot is not None:
            return slot
        special = value in (UNSET, OTHER)
        tracked = len(values) - (UNSET in values) - (OTHER in values)
        if special or tracked < self.max_values:
            slot = values[value] = Decayed()
            return slot
        if state.tick >= state.rescan_at[key]:
            stale = self._stale(values, state.base_weight)
            if stale is not None:
                del values[stale]
                slot = values[value] = Decayed()
                return slot
            state.rescan_at[key] = state.tick + _RESCAN_AFTER
        slot = values.get(OTHER)
        if slot is None:
            slot = values[OTHER] = Decayed()
        return slot

    def _stale(self, values: dict[str, Decayed], base_weight: float) -> str | None:
        for value, slot in values.items():
            if value not in (UNSET, OTHER) and slot.base_n / base_weight < _STALE_WEIGHT:
                return value
        return None

    def snapshot(self, service: str) -> ServiceSnapshot | None:
        """Every slice of `service`, decayed to its latest score. Reading changes nothing."""
        state = self._services.get(service)
        if state is None:
            return None
        r, b = 1.0 / state.recent_weight, 1.0 / state.base_weight

        def read(slot: Decayed, value: str) -> SliceStats:
            return SliceStats(value, slot.recent_n * r, slot.recent_sum * r, slot.base_n * b, slot.base_sum * b,
                              slot.base_sq * b)

        return ServiceSnapshot(
            service=service,
            scores=state.tick,
            total=read(state.total, ""),
            retrievers=[read(slot, name) for name, slot in state.retrievers.items()],
            attributes={key: [read(slot, value) for value, slot in values.items()] for key, values in state.values.items()},
        )


def _value_text(raw: Any) -> str:
    if raw is None or raw == "":
        return UNSET
    if isinstance(raw, str):
        return raw if len(raw) <= MAX_VALUE_CHARS else raw[:MAX_VALUE_CHARS]
    if isinstance(raw, bool):
        return "true" if raw else "false"
    text = str(raw)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS]
