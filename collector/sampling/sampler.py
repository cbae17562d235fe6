"""Deterministic sampling by trace id, with rules by service and span attributes.

The decision is a pure function of the trace id and the rate: the low 8 bytes of the trace id,
read as an unsigned integer, are kept iff they fall below `rate * 2**64`. Every replica and every
restart therefore agrees, and a lower rate's sample is a subset of a higher rate's (the same
trace ids are below the smaller threshold). W3C trace ids carry their randomness in the low
bytes, which is why those are the ones used.

Two moments decide:
- `keep_trace(trace_id, service)`: the head decision at the first span of a trace, before any
  attribute is read. It must keep every trace that some retrieval of that service could be
  sampled in, so it uses the highest rate that any rule could give the service.
- `decide(trace_id, service, attributes)`: the exact per-retrieval decision, with the first rule
  that matches the service and the retrieval's attributes. Its rate is at most the head rate, so
  its sample is a subset of what the head kept.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from ctxprec.collector.sampling.config import SamplingRule

_SPACE = 1 << 64


@dataclass(frozen=True, slots=True)
class SampleDecision:
    sampled: bool
    rate: float
    rule_index: int | None  # None: the default rate applied


def trace_id_bytes(trace_id: str | bytes) -> bytes:
    if isinstance(trace_id, bytes):
        return trace_id
    try:
        return bytes.fromhex(trace_id)
    except ValueError:
        # Not hex (rag_event ids are free-form): hash it so the decision stays deterministic.
        import hashlib

        return hashlib.blake2b(trace_id.encode("utf-8"), digest_size=16).digest()


def trace_hash(trace_id: str | bytes) -> int:
    """The low 8 bytes of the trace id as an unsigned big-endian integer."""
    # Big-endian: an id shorter than 8 bytes reads as if padded with leading zeros.
    raw = trace_id if isinstance(trace_id, bytes) else trace_id_bytes(trace_id)
    return int.from_bytes(raw[-8:], "big")


def rate_threshold(rate: float) -> int:
    """A trace is kept at `rate` iff its `trace_hash` is below this."""
    return int(rate * _SPACE)


def below_rate(trace_id: str | bytes, rate: float) -> bool:
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    return trace_hash(trace_id) < rate_threshold(rate)


class TraceSampler(Protocol):
    """A sampler as its users see it (the gate, trace assembly, the Kafka receiver and its byte
    peek): `Sampler`, or `adaptive.AdaptiveSampler` wrapping one. `generation` changes whenever a
    head rate changes, so that whoever caches thresholds knows when to drop them."""

    @property
    def generation(self) -> int: ...

    def head_rate(self, service: str) -> float: ...

    def keep_trace(self, trace_id: bytes, service: str) -> bool: ...

    def decide(self, trace_id: str | bytes, service: str, attributes: Mapping[str, Any]) -> SampleDecision: ...


class Sampler:
    # The rates are fixed at construction: a threshold cached once stays right.
    generation = 0

    def __init__(self, default_rate: float = 1.0, rules: list[SamplingRule] | None = None) -> None:
        if not 0.0 <= default_rate <= 1.0:
            raise ValueError(f"default_rate: must be between 0 and 1, got {default_rate!r}")
        self.default_rate = default_rate
        self.rules = list(rules or [])
        self._head_rate_cache: dict[str, float] = {}

    def head_rate(self, service: str) -> float:
        """Highest rate any retrieval of `service` could get. A rule with attribute conditions
        might match or not, so both its rate and whatever follows it count."""
        cached = self._head_rate_cache.get(service)
        if cached is not None:
            return cached
        best = 0.0
        for rule in self.rules:
            if not rule.matches_service(service):
                continue
            best = max(best, rule.rate)
            if not rule.attributes:
                # Unconditional for this service: later rules and the default never apply.
                break
        else:
            best = max(best, self.default_rate)
        if len(self._head_rate_cache) < 10_000:
            self._head_rate_cache[service] = best
        return best

    def keep_trace(self, trace_id: bytes, service: str) -> bool:
        return below_rate(trace_id, self.head_rate(service))

    def rate_for(self, service: str, attributes: Mapping[str, Any]) -> tuple[float, int | None]:
        for index, rule in enumerate(self.rules):
            if rule.matches(service, attributes):
                return rule.rate, index
        return self.default_rate, None

    def decide(self, trace_id: str | bytes, service: str, attributes: Mapping[str, Any]) -> SampleDecision:
        rate, index = self.rate_for(service, attributes)
        return SampleDecision(below_rate(trace_id, rate), rate, index)
