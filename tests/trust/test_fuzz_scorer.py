"""Fuzzing the parsers of untrusted text on the scorer side: the judge's verdict answers
(scorer/judge/verdicts.py), the stub judge's BEGIN_DATA block (collector/stub_judge.py) and RAG
events (scorer/events.py). Each may raise only its documented error type, must finish well
within the deadline, and must return output bounded by its input."""
from __future__ import annotations

import json
from typing import Any

import pytest

from ctxprec.collector.stub_judge import (
    BadRequest,
    answer_reason,
    answer_verdicts,
    parse_data_block,
)
from ctxprec.scorer.events import (
    EventError,
    RagEvent,
    parse_rag_event,
    parse_rag_event_line,
)
from ctxprec.scorer.judge.verdicts import MalformedAnswer, parse_reason, parse_verdicts
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.trust.fuzz_strategies import deep, dumps, json_values

pytestmark = pytest.mark.slow

FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])

# --- judge answers ---------------------------------------------------------------------------

verdict_words = st.one_of(st.sampled_from(["yes", "no", " Yes ", "NO", "maybe", "", "yes."]), json_values)
entries = st.one_of(
    st.fixed_dictionaries(
        {"context_index": st.one_of(st.integers(-2, 8), st.booleans(), json_values)},
        optional={"verdict": verdict_words, "reason": st.one_of(st.text(max_size=40), json_values)},
    ),
    json_values,
)
verdict_objects = st.one_of(
    st.builds(lambda items: {"verdicts": items}, st.lists(entries, max_size=10)),
    st.dictionaries(st.text(max_size=10), json_values, max_size=3),
)


def wrap(body: str, how: str) -> str:
    return {
        "bare": body,
        "fenced": f"```json\n{body}\n```",
        "prose": f"Here are my verdicts:\n{body}\nHope this helps.",
        "two": f"{body}\n{body}",
        "cut": body[: len(body) // 2],
    }[how]


answers = st.one_of(
    st.text(max_size=300),
    st.builds(wrap, verdict_objects.map(dumps), st.sampled_from(["bare", "fenced", "prose", "two", "cut"])),
)
expected_indices = st.sets(st.integers(0, 6), min_size=1, max_size=7)


def whole_index(value: Any) -> int | None:
    """A context_index as the judge may write it: an int, or a string of digits (never a bool)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def numbering(expected: set[int], given: set[int]) -> int | None:
    """How far the answer's indices are shifted: 1 when contexts 0..n-1 were asked for and the
    answer numbered them 1..n (0 absent, n present), None when that cannot be told (within 1..n,
    0 and n absent), else 0."""
    n = len(expected)
    if not given or 0 in given or expected != set(range(n)) or not given <= set(range(1, n + 1)):
        return 0
    return 1 if n in given else None


def oracle(obj: Any, expected: set[int]) -> dict[int, bool]:
    """The verdicts a strict reading must accept: an expected index (after the numbering is
    told) given by exactly one entry with a yes/no verdict and a string (or no) reason; never
    anything else. Unclear numbering accepts nothing."""
    entries = [e for e in (obj.get("verdicts", []) if isinstance(obj, dict) else []) if isinstance(e, dict)]
    indexed = [(whole_index(e.get("context_index")), e) for e in entries]
    indexed = [(i, e) for i, e in indexed if i is not None]
    shift = numbering(expected, {i for i, _ in indexed})
    if shift is None:
        return {}
    counts: dict[int, int] = {}
    good: dict[int, bool] = {}
    for raw, entry in indexed:
        index = raw - shift
        if index not in expected:
            continue
        counts[index] = counts.get(index, 0) + 1
        word = entry.get("verdict")
        reason = entry.get("reason")
        if isinstance(word, str) and word.strip().lower() in ("yes", "no") and (reason is None or isinstance(reason, str)):
            good[index] = word.strip().lower() == "yes"
    return {i: v for i, v in good.items() if counts[i] == 1}


@FUZZ
@given(answers, expected_indices)
@example('{"verdicts": ' + "[" * 5000, {0})
@example("```json\n" + deep(3000, "{") + "\n```", {0})
@example('{"verdicts": [' + deep(2000) + "]}", {0})
def test_verdict_parsing_only_raises_malformed_answer(text: str, expected: set[int]) -> None:
    try:
        parsed = parse_verdicts(text, expected)
    except MalformedAnswer as exc:
        assert str(exc)
        return
    resolved = set(parsed.verdicts)
    assert resolved <= expected
    assert resolved.isdisjoint(parsed.unresolved)
    assert resolved | set(parsed.unresolved) == expected  # every index is either judged or re-asked
    assert all(isinstance(v.reason, str) and isinstance(v.relevant, bool) for v in parsed.verdicts.values())
    assert isinstance(parsed.describe(), str)


@FUZZ
@given(verdict_objects, expected_indices)
def test_a_clean_verdict_object_is_read_exactly(obj: dict[str, Any], expected: set[int]) -> None:
    try:
        parsed = parse_verdicts(json.dumps(obj, allow_nan=True), expected)
    except MalformedAnswer:
        assert not isinstance(obj.get("verdicts"), list)
        return
    assert {i: v.relevant for i, v in parsed.verdicts.items()} == oracle(obj, expected)


@FUZZ
@given(st.one_of(answers, st.builds(lambda v: dumps({"reason": v}), json_values)))
@example('{"reason": ' + "[" * 5000)
def test_reason_parsing_only_raises_malformed_answer(text: str) -> None:
    try:
        reason = parse_reason(text)
    except MalformedAnswer:
        return
    assert isinstance(reason, str) and reason and len(reason) <= len(text)


# --- the stub judge's data block --------------------------------------------------------------

contexts_items = st.lists(
    st.one_of(st.fixed_dictionaries({"context_index": st.integers(-1, 50), "text": st.text(max_size=60)}), json_values),
    max_size=8,
)
data_blocks = st.one_of(
    st.fixed_dictionaries(
        {"task": st.sampled_from(["verdicts", "reason", "other"])},
        optional={
            "query": st.one_of(st.text(max_size=60), json_values),
            "reference_kind": st.sampled_from(["output", "query", "expected_output", "x"]),
            "reference": st.one_of(st.text(max_size=60), json_values),
            "contexts": st.one_of(contexts_items, json_values),
            "score": json_values,
            "verdicts": json_values,
        },
    ),
    json_values,
)


def user_content(line: str, how: str) -> str:
    return {
        "block": f"Judge these.\nBEGIN_DATA\n{line}\nEND_DATA",
        "no_end": f"BEGIN_DATA\n{line}",
        "trailing": f"BEGIN_DATA\n{line}\nEND_DATA\nBEGIN_DATA\n",
        "raw": line,
    }[how]


messages = st.one_of(
    json_values,
    st.lists(
        st.one_of(
            st.builds(
                lambda role, line, how: {"role": role, "content": user_content(line, how)},
                st.sampled_from(["user", "system", "assistant"]),
                st.one_of(data_blocks.map(dumps), st.text(max_size=80)),
                st.sampled_from(["block", "no_end", "trailing", "raw"]),
            ),
            json_values,
        ),
        max_size=4,
    ),
)


@FUZZ
@given(messages)
@example([{"role": "user", "content": "BEGIN_DATA\n" + "[" * 5000 + "\nEND_DATA"}])
@example([{"role": "user", "content": "BEGIN_DATA\n" + deep(3000, "{") + "\nEND_DATA"}])
def test_stub_data_block_parsing_only_raises_bad_request(msgs: Any) -> None:
    try:
        data = parse_data_block(msgs)
        task = data.get("task", "verdicts")
        if task == "reason":
            reason = answer_reason(data)
            assert reason.startswith("The score is ")
            return
        verdicts = answer_verdicts(data)
    except BadRequest as exc:
        assert str(exc)
        return
    # One verdict per context asked, in the order asked.
    assert [v["context_index"] for v in verdicts] == [c["context_index"] for c in data["contexts"]]
    assert all(v["verdict"] in ("yes", "no") for v in verdicts)


# --- RAG events -------------------------------------------------------------------------------

hexes = st.one_of(st.text(alphabet="0123456789abcdefABCDEF", min_size=0, max_size=34), json_values)
contexts_field = st.one_of(
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.fixed_dictionaries(
                {"content": st.one_of(st.text(max_size=40), json_values)},
                optional={"id": json_values, "score": json_values, "metadata": json_values},
            ),
            json_values,
        ),
        max_size=6,
    ),
    json_values,
)
events = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "query": st.one_of(st.text(max_size=40), json_values),
            "contexts": contexts_field,
            "trace_id": hexes,
            "span_id": hexes,
            "service": json_values,
            "output": st.one_of(st.text(max_size=40), json_values),
            "expected_output": json_values,
            "attributes": json_values,
            "timestamp": st.one_of(
                st.sampled_from(["2026-11-29T12:00:00Z", "2026-13-40T99:00:00Z", "yesterday", "2026-11-29"]),
                st.floats(allow_nan=True, allow_infinity=True),
                st.integers(min_value=-(10**20), max_value=10**400),
                json_values,
            ),
        },
    ),
    json_values,
)


def check_event(event: RagEvent, obj: dict[str, Any]) -> None:
    assert isinstance(event.query, str)
    assert len(event.contexts) == len(obj["contexts"])
    assert all(isinstance(c.content, str) for c in event.contexts)
    assert event.trace_id == "" or (len(event.trace_id) == 32 and event.trace_id == event.trace_id.lower())
    assert event.span_id == "" or len(event.span_id) == 16


@FUZZ
@given(events)
def test_rag_event_parsing_only_raises_event_error(obj: Any) -> None:
    try:
        event = parse_rag_event(obj)
    except EventError as exc:
        assert exc.message
        return
    check_event(event, obj)


@FUZZ
@given(st.one_of(events.map(dumps), st.text(max_size=200)), st.integers(1, 10**6))
@example("[" * 5000, 1)
@example('{"query": "q", "contexts": [' + deep(3000) + "]}", 2)
@example('{"query": "q", "contexts": [{"content": "a", "score": ' + "9" * 400 + "}]}", 3)
@example('{"query": "q", "contexts": ["a"], "timestamp": ' + "9" * 400 + "}", 4)
def test_rag_event_lines_only_raise_event_error_naming_the_line(line: str, line_no: int) -> None:
    try:
        event = parse_rag_event_line(line, line_no)
    except EventError as exc:
        assert exc.message.startswith(f"line {line_no}: ")
        return
    check_event(event, json.loads(line))
