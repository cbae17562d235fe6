"""RAG event parsing and the score record format (docs/FORMATS.md)."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest
from ctxprec.scorer.events import (
    EventError,
    parse_rag_event,
    parse_rag_event_line,
    parse_rfc3339,
)
from ctxprec.scorer.records import (
    JUDGE_FIELDS,
    RECORD_FIELDS,
    failure_record,
    record_id,
    rfc3339,
    score_record,
)
from ctxprec.scorer.result import JudgeUsage, ScoreResult, Verdict

TRACE = "0AF7651916CD43DD8448EB211C80319C"
SPAN = "B7AD6B7169203331"
RFC3339_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


def full_event() -> dict:
    return {
        "trace_id": TRACE,
        "span_id": SPAN,
        "service": "support-bot",
        "query": "How do I reset my password?",
        "contexts": [
            "Open settings, then security.",
            {"content": "Reset links expire after an hour.", "id": "doc-7", "score": 0.82, "metadata": {"lang": "en"}},
            {"content": "Office hours", "id": 12},
        ],
        "output": "Open settings.",
        "expected_output": "Use the settings page.",
        "attributes": {"retriever": "kb-v2", "tenant": "a"},
        "timestamp": "2026-11-29T12:00:00Z",
        "extra": "ignored",
    }


def test_full_event_parses_every_field() -> None:
    event = parse_rag_event(full_event())
    assert event.query == "How do I reset my password?"
    assert event.trace_id == TRACE.lower() and event.span_id == SPAN.lower()
    assert event.service == "support-bot"
    assert event.context_texts == [
        "Open settings, then security.",
        "Reset links expire after an hour.",
        "Office hours",
    ]
    second = event.contexts[1]
    assert (second.id, second.score, second.metadata) == ("doc-7", 0.82, {"lang": "en"})
    assert event.contexts[2].id == "12"
    assert event.contexts[0].id is None
    assert event.output == "Open settings." and event.expected_output == "Use the settings page."
    assert event.retriever == "kb-v2"
    assert event.timestamp == "2026-11-29T12:00:00Z"


def test_minimal_event_defaults() -> None:
    event = parse_rag_event({"query": "q", "contexts": ["a"]})
    assert (event.trace_id, event.span_id, event.service, event.retriever) == ("", "", "", "")
    assert event.output is None and event.expected_output is None and event.timestamp is None
    assert event.attributes == {}


def test_empty_contexts_list_is_a_valid_event() -> None:
    # Whether there is anything to score is the scorer's decision ("no_contexts"), not a format error.
    assert parse_rag_event({"query": "q", "contexts": []}).contexts == []


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"contexts": ["a"]}, "missing required field 'query'"),
        ({"query": None, "contexts": ["a"]}, "missing required field 'query'"),
        ({"query": "q"}, "missing required field 'contexts'"),
        ({"query": 3, "contexts": ["a"]}, "'query' must be a string, got a number"),
        ({"query": "q", "contexts": "a"}, "'contexts' must be a list of strings or objects with 'content', got a string"),
        ({"query": "q", "contexts": ["a", 5]}, "'contexts' must be a list of strings or objects with 'content'; item 1 is a number"),
        ({"query": "q", "contexts": [{"text": "a"}]}, "'contexts' must be a list of strings or objects with 'content'; item 0 has no 'content'"),
        ({"query": "q", "contexts": [{"content": ["a"]}]}, "item 0 has 'content' of type a list"),
        ({"query": "q", "contexts": [{"content": "a", "score": "high"}]}, "'contexts' item 0: 'score' must be a number, got a string"),
        ({"query": "q", "contexts": [{"content": "a", "metadata": []}]}, "'contexts' item 0: 'metadata' must be an object, got a list"),
        ({"query": "q", "contexts": ["a"], "service": 1}, "'service' must be a string, got a number"),
        ({"query": "q", "contexts": ["a"], "output": {}}, "'output' must be a string, got an object"),
        ({"query": "q", "contexts": ["a"], "attributes": []}, "'attributes' must be an object, got a list"),
        ({"query": "q", "contexts": ["a"], "trace_id": "abc"}, "'trace_id' must be 32 hex characters, got 'abc'"),
        ({"query": "q", "contexts": ["a"], "span_id": "zz" * 8}, "'span_id' must be 16 hex characters"),
        ({"query": "q", "contexts": ["a"], "timestamp": "yesterday"}, "'timestamp' must be an RFC 3339 time"),
        (["not", "an", "object"], "an event must be a JSON object, got a list"),
    ],
)
def test_bad_events_name_the_field_and_the_problem(obj: object, message: str) -> None:
    with pytest.raises(EventError) as caught:
        parse_rag_event(obj)
    assert message in caught.value.message


def test_epoch_timestamp_becomes_rfc3339() -> None:
    event = parse_rag_event({"query": "q", "contexts": ["a"], "timestamp": 1796040000})
    assert parse_rfc3339(event.timestamp) == 1796040000


def test_line_errors_carry_the_line_number() -> None:
    with pytest.raises(EventError) as caught:
        parse_rag_event_line("{not json", 7)
    assert caught.value.message.startswith("line 7: not valid JSON")
    with pytest.raises(EventError) as caught:
        parse_rag_event_line('{"contexts": ["a"]}', 12)
    assert caught.value.message == "line 12: missing required field 'query' (or an alias: 'user_input', 'input' or 'question')"
    assert parse_rag_event_line(json.dumps(full_event()), 1).service == "support-bot"


def make_result(scale: float = 1) -> ScoreResult:
    usage = JudgeUsage(model="openai/x", prompt_version="pv1", cached_contexts=1)
    usage.add_call(100, 20, 0.00001, 12.345)
    usage.add_call(50, 10, 0.00002, 10.0)
    return ScoreResult(
        score=0.83 * scale,
        reason="The score is 0.83 because ...",
        verdicts=[Verdict(0, True, "yes it is"), Verdict(1, False, "no", cached=True), Verdict(2, True, "yes")],
        precision_at_k=2 / 3,
        hit=True,
        first_relevant_rank=1,
        relevant_count=2,
        k=3,
        scale=scale,
        reference_kind="output",
        usage=usage,
    )


def test_score_record_has_the_spec_fields_in_order() -> None:
    moment = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=timezone.utc)
    record = score_record(
        make_result(),
        record_id="rid",
        trace_id="t",
        span_id="s",
        service="svc",
        retriever="kb",
        sample_rate=0.1,
        scored_at=moment,
        timestamp="2026-11-28T09:30:00Z",
    )
    assert tuple(record) == RECORD_FIELDS
    assert tuple(record["judge"]) == JUDGE_FIELDS
    assert record["verdicts"] == [
        {"index": 0, "relevant": True, "reason": "yes it is"},
        {"index": 1, "relevant": False, "reason": "no"},
        {"index": 2, "relevant": True, "reason": "yes"},
    ]
    assert record["scale"] == 1 and isinstance(record["scale"], int)
    assert "document" not in json.dumps(record["verdicts"])  # only when the caller names documents
    assert record["judge"] == {
        "model": "openai/x",
        "prompt_version": "pv1",
        "calls": 2,
        "prompt_tokens": 150,
        "completion_tokens": 30,
        "cost_usd": 0.00003,
        "latency_ms": 22.3,
        "cached_contexts": 1,
    }
    assert (record["decision"], record["error"], record["sample_rate"]) == ("evaluated", None, 0.1)
    assert record["scored_at"] == "2026-11-29T12:00:00.123Z"
    assert record["timestamp"] == "2026-11-28T09:30:00Z"  # the event's own time, as it gave it
    # The record is plain JSON.
    assert json.loads(json.dumps(record)) == record


def test_verdicts_name_their_document_when_ids_are_given() -> None:
    record = score_record(make_result(), record_id="rid", document_ids=["doc-7", "sha256:0123456789ab", "kb/12"])
    assert tuple(record) == RECORD_FIELDS
    assert record["verdicts"] == [
        {"index": 0, "relevant": True, "reason": "yes it is", "document": "doc-7"},
        {"index": 1, "relevant": False, "reason": "no", "document": "sha256:0123456789ab"},
        {"index": 2, "relevant": True, "reason": "yes", "document": "kb/12"},
    ]
    # Fewer ids than contexts: the verdicts without one are written without one, never misnamed.
    short = score_record(make_result(), record_id="rid", document_ids=["doc-7"])
    assert [v.get("document") for v in short["verdicts"]] == ["doc-7", None, None]


def test_failure_record_nulls_the_score_and_says_why() -> None:
    record = failure_record(
        error_type="timeout",
        message="line 3: judge timed out",
        record_id="rid",
        trace_id="t",
        service="svc",
        scale=10,
        model="openai/x",
        prompt_version="pv1",
        k=4,
    )
    assert tuple(record) == RECORD_FIELDS
    assert record["score"] is None and record["reason"] is None and record["hit"] is None
    assert record["error"] == {"type": "timeout", "message": "line 3: judge timed out"}
    assert record["decision"] == "failed" and record["k"] == 4 and record["scale"] == 10
    assert record["judge"]["model"] == "openai/x" and record["judge"]["calls"] == 0
    assert RFC3339_MS.match(record["scored_at"])
    assert record["timestamp"] is None  # no event time given


# The published order (docs/FORMATS.md): consumers diff and grep records, so keys are only ever
# appended, never moved.
PUBLISHED_ORDER = (
    "id", "trace_id", "span_id", "service", "retriever", "score", "scale", "reason", "verdicts",
    "precision_at_k", "hit", "first_relevant_rank", "relevant_count", "k", "reference_kind",
    "answer_source", "judge", "sample_rate", "decision", "error", "scored_at", "timestamp", "query", "line",
    "event_id",
)


def test_record_fields_keep_their_order_with_timestamp_after_scored_at() -> None:
    assert RECORD_FIELDS == PUBLISHED_ORDER
    record = score_record(make_result(), record_id="rid")
    assert tuple(record) == PUBLISHED_ORDER and record["timestamp"] is None
    assert record["query"] is None and record["line"] is None and record["event_id"] is None


def test_record_id_is_a_stable_idempotency_key() -> None:
    a = record_id("t1", "s1", "cfg-a")
    assert a == record_id("t1", "s1", "cfg-a")
    assert re.fullmatch(r"[0-9a-f]{32}", a)
    others = {record_id("t2", "s1", "cfg-a"), record_id("t1", "s2", "cfg-a"), record_id("t1", "s1", "cfg-b")}
    assert a not in others and len(others) == 3
    # Field boundaries matter: ("ab", "c") is not ("a", "bc").
    assert record_id("ab", "c", "f") != record_id("a", "bc", "f")
    # Events without ids are told apart by their content, and content is ignored when ids exist.
    assert record_id("", "", "f", content="x") != record_id("", "", "f", content="y")
    assert record_id("t1", "s1", "cfg-a", content="anything") == a


def test_rfc3339_converts_to_utc() -> None:
    from datetime import timedelta

    moment = datetime(2026, 11, 29, 14, 0, 0, tzinfo=timezone(timedelta(hours=2)))
    assert rfc3339(moment) == "2026-11-29T12:00:00.000Z"
