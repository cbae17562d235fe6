"""Sampling by trace id: deterministic, nested across rates, rules by service and attributes."""
from __future__ import annotations

import random

from ctxprec.collector.sampling.sampler import (
    Sampler,
    SamplingRule,
    below_rate,
    trace_hash,
)


def _trace_ids(n: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.getrandbits(128).to_bytes(16, "big") for _ in range(n)]


def test_decision_is_a_function_of_the_trace_id_only() -> None:
    ids = _trace_ids(500)
    a = Sampler(default_rate=0.3)
    b = Sampler(default_rate=0.3)  # another replica, or the same one after a restart
    assert [a.keep_trace(t, "svc") for t in ids] == [b.keep_trace(t, "svc") for t in ids]
    hexed = [a.decide(t.hex(), "svc", {}).sampled for t in ids]
    assert hexed == [a.keep_trace(t, "svc") for t in ids]


def test_lower_rate_sample_is_a_subset_of_a_higher_one_and_rate_is_respected() -> None:
    ids = _trace_ids(4000)
    kept = {rate: {t for t in ids if below_rate(t, rate)} for rate in (0.01, 0.1, 0.25, 0.5, 1.0)}
    rates = sorted(kept)
    for low, high in zip(rates, rates[1:]):
        assert kept[low] <= kept[high]
    assert len(kept[1.0]) == len(ids)
    for rate in (0.1, 0.25, 0.5):
        assert abs(len(kept[rate]) / len(ids) - rate) < 0.04
    assert not any(below_rate(t, 0.0) for t in ids)


def test_hash_reads_the_low_eight_bytes() -> None:
    low_zero = bytes.fromhex("ff" * 8 + "00" * 8)
    low_max = bytes.fromhex("00" * 8 + "ff" * 8)
    assert trace_hash(low_zero) == 0
    assert trace_hash(low_max) == 2**64 - 1
    assert below_rate(low_zero, 0.0001)
    assert not below_rate(low_max, 0.9999)


def test_rules_first_match_wins_and_head_rate_covers_every_rule() -> None:
    rules = [
        SamplingRule(rate=1.0, service="checkout", attributes={"retriever": "kb-v2"}),
        SamplingRule(rate=0.2, service="checkout"),
        SamplingRule(rate=0.0, service="internal-*"),
    ]
    sampler = Sampler(default_rate=0.05, rules=rules)
    assert sampler.rate_for("checkout", {"retriever": "kb-v2"}) == (1.0, 0)
    assert sampler.rate_for("checkout", {"retriever": "kb-v1"}) == (0.2, 1)
    assert sampler.rate_for("internal-search", {}) == (0.0, 2)
    assert sampler.rate_for("support", {}) == (0.05, None)
    # The head decision must keep any trace a retrieval of that service could be sampled in.
    assert sampler.head_rate("checkout") == 1.0
    assert sampler.head_rate("internal-search") == 0.0
    assert sampler.head_rate("support") == 0.05

    for t in _trace_ids(2000, seed=3):
        for service, attrs in (("checkout", {"retriever": "kb-v1"}), ("checkout", {"retriever": "kb-v2"}),
                               ("support", {})):
            if sampler.decide(t, service, attrs).sampled:
                assert sampler.keep_trace(t, service)


def test_attribute_values_compare_as_strings() -> None:
    sampler = Sampler(default_rate=0.0, rules=[SamplingRule(rate=1.0, attributes={"tier": "1"})])
    assert sampler.decide("0" * 32, "svc", {"tier": 1}).sampled
    assert not sampler.decide("0" * 32, "svc", {"tier": 2}).sampled
    assert not sampler.decide("0" * 32, "svc", {}).sampled


def test_non_hex_trace_ids_still_decide_deterministically() -> None:
    sampler = Sampler(default_rate=0.5)
    ids = [f"order-{i}" for i in range(400)]
    first = [sampler.decide(t, "svc", {}).sampled for t in ids]
    assert first == [Sampler(default_rate=0.5).decide(t, "svc", {}).sampled for t in ids]
    assert 120 < sum(first) < 280
