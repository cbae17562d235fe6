"""The rag_event byte peek (head sampling without parsing) against the full parse and the
sampler: it may only ever answer with the service of an event that the head decision drops, and
must send everything it cannot be sure of the full way (None)."""
from __future__ import annotations

import json
import random

import pytest
from ctxprec.collector.kafka.offsets import PartitionOffsets
from ctxprec.collector.receivers.kafka_event_peek import EventPeek
from ctxprec.collector.sampling.sampler import Sampler, SamplingRule
from ctxprec.scorer.events import parse_rag_event

pytestmark = pytest.mark.slow

RATE = 0.01
KEPT_LOW = "0000000000000001"  # low 64 bits far below 1% of 2**64: kept
DROPPED_LOW = "ffffffffffffff00"  # far above: dropped


def _event(trace: str, service: str | None = "kb-bot", **extra: object) -> dict[str, object]:
    event: dict[str, object] = {"trace_id": trace, "span_id": trace[:16]}
    if service is not None:
        event["service"] = service
    event.update(query="q", contexts=["[relevant] a"], attributes={"retriever": "kb-v2"})
    event.update(extra)
    return event


def _raw(event: object, **dumps: object) -> bytes:
    return json.dumps(event, **dumps).encode()  # type: ignore[arg-type]


def test_agrees_with_the_full_parse_and_the_sampler_on_random_events() -> None:
    sampler = Sampler(RATE)
    peek = EventPeek(sampler)
    rnd = random.Random(7)
    dropped = 0
    for i in range(3000):
        trace = f"{rnd.getrandbits(128):032x}"
        service = rnd.choice(["kb-bot", "support", "", "ünï"])
        layout = rnd.choice([{}, {"separators": (",", ":")}, {"indent": 1}, {"sort_keys": True}])
        value = _raw(_event(trace, service), **layout)
        parsed = parse_rag_event(json.loads(value))
        keep = sampler.keep_trace(bytes.fromhex(parsed.trace_id), parsed.service)
        answer = peek.unsampled_service(value)
        if keep:
            assert answer is None, value
        elif service.isascii():
            # Every layout is decided from the bytes: sorted keys put `attributes` ({...}) first,
            # but the braces before the fields balance.
            assert answer == parsed.service, value
            dropped += 1
        else:
            assert answer is None  # json.dumps escapes it (\u00fc): the parser must read it
    assert dropped > 0.6 * 3000 * (1 - RATE)


@pytest.mark.parametrize("value, why", [
    (b'{"trace_id": "' + b"a" * 16 + KEPT_LOW.encode() + b'", "service": "kb-bot"}', "kept trace"),
    (b'not json at all', "not an object"),
    (b'\x0a\x02\x08\x01', "protobuf"),
    (b'{"trace_id": "' + b"a" * 16 + DROPPED_LOW.encode() + b'", "service": "kb-b', "truncated"),
    (b'  {"trace_id": "' + b"a" * 16 + DROPPED_LOW.encode() + b'"}', "leading space: let the parser judge"),
    (b'{"trace_id": "not-hex-' + b"x" * 10 + b'", "service": "kb-bot"}', "trace id not 32 hex"),
    (b'{"trace_id": "' + b"a" * 14 + DROPPED_LOW.encode() + b'", "service": "kb-bot"}', "trace id too short"),
    (b'{"attributes": {"trace_id": "' + b"a" * 16 + DROPPED_LOW.encode() + b'"}, "query": "q"}', "nested trace id"),
    (b'{"trace_id": "' + b"a" * 16 + DROPPED_LOW.encode() + b'", "service": "kb\\"bot"}', "escaped service"),
    (b'{"trace_id": "' + b"a" * 16 + DROPPED_LOW.encode() + b'", "service": null}', "null service"),
    (b'{"trace_id": "' + b"a" * 16 + DROPPED_LOW.encode() + b'", "m": {"service": "x"}}', "nested service only"),
    (b'{"trace_id": "' + b"a" * 16 + DROPPED_LOW.encode() + b'", "serv\\u0069ce": "x"}', "escaped key"),
    (b"", "empty"),
    (None, "tombstone"),
])
def test_anything_uncertain_takes_the_full_path(value: bytes | None, why: str) -> None:
    assert EventPeek(Sampler(RATE)).unsampled_service(value) is None, why


def test_missing_service_is_the_empty_service_like_the_full_parse() -> None:
    value = _raw(_event("b" * 16 + DROPPED_LOW, service=None))
    assert parse_rag_event(json.loads(value)).service == ""
    assert EventPeek(Sampler(RATE)).unsampled_service(value) == ""


def test_malformed_inside_the_braces_is_counted_when_dropped() -> None:
    """The documented trade-off: invalid JSON that still starts with { and ends with } is not
    examined when its trace is dropped."""
    value = b'{"trace_id": "' + b"c" * 16 + DROPPED_LOW.encode() + b'", "service": "kb-bot", "query": ]}'
    with pytest.raises(ValueError):
        json.loads(value)
    assert EventPeek(Sampler(RATE)).unsampled_service(value) == "kb-bot"


def test_service_rules_decide_per_service_and_rate_zero_goes_to_the_gate() -> None:
    sampler = Sampler(RATE, [SamplingRule(rate=1.0, service="vip-*"), SamplingRule(rate=0.0, service="off")])
    peek = EventPeek(sampler)
    trace = "d" * 16 + DROPPED_LOW
    assert peek.unsampled_service(_raw(_event(trace, "kb-bot"))) == "kb-bot"
    assert peek.unsampled_service(_raw(_event(trace, "vip-1"))) is None  # rate 1: always kept
    assert peek.unsampled_service(_raw(_event(trace, "off"))) is None  # `filtered` is the gate's to name


def test_a_run_of_done_offsets_is_one_step_and_waits_behind_an_undone_one() -> None:
    p = PartitionOffsets()
    p.track_done(9)  # offsets 0..9 dropped at once
    assert p.committable == 10 and p.undone == 0
    p.track(10)  # sampled, in flight
    p.track_done(20)  # 11..20 dropped behind it
    p.track(21)
    p.track_done(30)
    assert p.committable == 10 and p.undone == 2 and p.low_watermark == 10
    p.done(21)
    assert p.committable == 10  # 10 still in flight
    p.done(10)
    assert p.committable == 31 and p.undone == 0
    with pytest.raises(ValueError, match="below the committable"):
        p.track_done(25)
    p.track(31)
    with pytest.raises(ValueError, match="must increase"):
        p.track_done(31)


@pytest.mark.parametrize("delta", [-1, 0, 1])
@pytest.mark.parametrize("layout", ["first_keys", "other_order", "upper_case"])
def test_the_threshold_boundary_is_the_samplers_in_every_layout(delta: int, layout: str) -> None:
    """The common layout compares hex text, the others integers: both must agree with the sampler
    exactly at the threshold, where a trace is kept iff its low 64 bits are below it."""
    from ctxprec.collector.sampling.sampler import rate_threshold

    sampler = Sampler(RATE)
    low = rate_threshold(RATE) + delta
    trace = "ab" * 8 + f"{low:016x}"
    event: dict[str, object]
    if layout == "first_keys":
        event = {"trace_id": trace, "span_id": trace[:16], "service": "kb-bot", "query": "q", "contexts": ["a"]}
    elif layout == "other_order":
        event = {"service": "kb-bot", "query": "q", "trace_id": trace, "contexts": ["a"]}
    else:
        trace = trace.upper()
        event = {"trace_id": trace, "service": "kb-bot", "query": "q", "contexts": ["a"]}
    keep = sampler.keep_trace(bytes.fromhex(trace), "kb-bot")
    assert keep == (delta < 0)
    peek = EventPeek(sampler)
    for _ in range(2):  # the first sight of a service and the cached one
        assert peek.unsampled_service(_raw(event)) == (None if keep else "kb-bot")


def test_a_batch_is_answered_exactly_as_message_by_message() -> None:
    """`unsampled_services` (the receiver's batch form) reads the common layout in its own loop;
    on any mix of layouts, garbage and tombstones it must answer what the general byte search
    (`_general`, which knows no layout) answers message by message."""
    sampler = Sampler(0.3, [SamplingRule(rate=1.0, service="always"), SamplingRule(rate=0.0, service="never")])
    rnd = random.Random(11)
    values: list[bytes | None] = []
    for i in range(2000):
        trace = f"{rnd.getrandbits(128):032x}"
        if rnd.random() < 0.1:
            trace = trace.upper()
        service = rnd.choice(["kb-bot", "support", "always", "never", "", "ünï", 'quo"te'])
        layout = rnd.choice([{}, {"separators": (",", ":")}, {"indent": 1}, {"sort_keys": True}])
        value: bytes | None = _raw(_event(trace, service), **layout)
        roll = rnd.random()
        if roll < 0.05:
            value = None
        elif roll < 0.1:
            value = value[: rnd.randrange(len(value))]  # type: ignore[index]
        elif roll < 0.12:
            value = bytes(rnd.getrandbits(8) for _ in range(40))
        values.append(value)
    one_by_one = EventPeek(sampler)
    expected = [one_by_one._general(v) for v in values]
    assert EventPeek(sampler).unsampled_services(values) == expected
    assert 0 < sum(a is not None for a in expected) < len(values)


@pytest.mark.parametrize("layout", ["first_keys", "other_order"])
def test_cached_thresholds_are_dropped_when_an_adaptive_boost_changes_the_rate(layout: str) -> None:
    """A boost raises the service's head rate: an event between the base and the raised threshold
    must then take the full way (None), and be dropped again once the rate is back to base."""
    from dataclasses import dataclass

    from ctxprec.collector.sampling.adaptive import AdaptiveSampler, AdaptiveSettings

    @dataclass
    class Detector:
        statistic: float = 0.0
        alarmed: bool = False

    sampler = AdaptiveSampler(Sampler(RATE), AdaptiveSettings(factor=10.0))
    peek = EventPeek(sampler)
    band = "ab" * 8 + "0800000000000000"  # 3.1% of 2**64: above 1%, below the raised 10%
    event = ({"trace_id": band, "span_id": band[:16], "service": "kb-bot", "query": "q", "contexts": ["a"]}
             if layout == "first_keys" else {"service": "kb-bot", "query": "q", "trace_id": band, "contexts": ["a"]})
    assert peek.unsampled_service(_raw(event)) == "kb-bot"  # learned and cached at 1%
    detector = Detector(statistic=0.5)
    sampler.observe("kb-bot", detector)
    assert sampler.head_rate("kb-bot") == pytest.approx(0.1)
    assert peek.unsampled_service(_raw(event)) is None
    assert sampler.keep_trace(bytes.fromhex(band), "kb-bot")  # the full way keeps it
    detector.statistic = 0.0
    sampler.observe("kb-bot", detector)
    assert peek.unsampled_service(_raw(event)) == "kb-bot"
