"""Field names of the datasets people already have (Ragas, DeepEval, question/answer/ground_truth)
read as the RAG event's own fields, by the one parser every reader uses: JSONL and CSV batch input
and the Kafka `rag_event` decoder."""
from __future__ import annotations

import json

import pytest

from ctxprec.collector.receivers.kafka_messages import MessageError, decode_rag_event, retrieval_from_event
from ctxprec.scorer.events import (
    EVENT_FIELDS,
    FIELD_ALIASES,
    EventError,
    parse_rag_event,
    parse_rag_event_with_notes,
)

QUESTION = "How long do reset links last?"
CONTEXTS = ["Reset links expire after one hour.", "Office hours are 9 to 5."]
ANSWER = "They last one hour."
REFERENCE = "Reset links are valid for one hour."

RAGAS = {"user_input": QUESTION, "retrieved_contexts": CONTEXTS, "response": ANSWER, "reference": REFERENCE}
DEEPEVAL = {"input": QUESTION, "retrieval_context": CONTEXTS, "actual_output": ANSWER, "expected_output": REFERENCE}
CLASSIC = {"question": QUESTION, "contexts": CONTEXTS, "answer": ANSWER, "ground_truth": REFERENCE}


@pytest.mark.parametrize("obj", [RAGAS, DEEPEVAL, CLASSIC], ids=["ragas", "deepeval", "question-answer"])
def test_dataset_columns_fill_the_event_fields(obj: dict[str, object]) -> None:
    parsed = parse_rag_event_with_notes(obj)
    event = parsed.event
    assert event.query == QUESTION
    assert event.context_texts == CONTEXTS
    assert event.output == ANSWER
    assert event.expected_output == REFERENCE
    assert parsed.notes.unknown == () and parsed.notes.conflicts == ()
    # Every alias that gave a value is reported with the field it filled; the event's own names are not.
    expected = {(key, field) for field, aliases in FIELD_ALIASES.items() for key in aliases if key in obj}
    assert set(parsed.notes.aliases) == expected


def test_answer_alone_is_the_output() -> None:
    event = parse_rag_event({"query": QUESTION, "contexts": CONTEXTS, "answer": ANSWER})
    assert event.output == ANSWER and event.expected_output is None


def test_the_events_own_name_wins_over_an_alias() -> None:
    parsed = parse_rag_event_with_notes({"query": QUESTION, "question": "other", "contexts": CONTEXTS,
                                         "output": ANSWER, "answer": "stale answer"})
    assert parsed.event.query == QUESTION and parsed.event.output == ANSWER
    conflicts = {(c.event_field, c.used, c.ignored) for c in parsed.notes.conflicts}
    assert conflicts == {("query", "query", ("question",)), ("output", "output", ("answer",))}
    assert parsed.notes.aliases == ()


def test_two_aliases_without_the_field_take_the_first_in_table_order() -> None:
    parsed = parse_rag_event_with_notes({"question": "from question", "user_input": QUESTION, "contexts": CONTEXTS})
    assert FIELD_ALIASES["query"].index("user_input") < FIELD_ALIASES["query"].index("question")
    assert parsed.event.query == QUESTION
    (conflict,) = parsed.notes.conflicts
    assert (conflict.used, conflict.ignored) == ("user_input", ("question",))


def test_a_null_alias_is_absent_not_a_conflict() -> None:
    parsed = parse_rag_event_with_notes({"query": QUESTION, "contexts": CONTEXTS, "output": None, "answer": ANSWER})
    assert parsed.event.output == ANSWER and parsed.notes.conflicts == ()
    parsed = parse_rag_event_with_notes({"query": QUESTION, "contexts": CONTEXTS, "output": ANSWER, "answer": None})
    assert parsed.event.output == ANSWER and parsed.notes.conflicts == ()


def test_unknown_keys_are_listed_in_input_order() -> None:
    parsed = parse_rag_event_with_notes({"zeta": 1, "query": QUESTION, "contexts": CONTEXTS, "alpha": None, "rubrics": {}})
    assert parsed.notes.unknown == ("zeta", "alpha", "rubrics")


def test_strict_rejects_unknown_keys_and_conflicts_naming_them() -> None:
    with pytest.raises(EventError) as caught:
        parse_rag_event_with_notes({"query": QUESTION, "contexts": CONTEXTS, "answer": ANSWER, "output": ANSWER,
                                    "reference_contexts": [], "note": "x"}, strict=True)
    message = caught.value.message
    assert "unknown keys 'reference_contexts' and 'note'" in message
    assert "both 'output' and its alias 'answer' are given" in message
    # Aliases alone are not a strict error: they are the documented names.
    assert parse_rag_event_with_notes(RAGAS, strict=True).event.output == ANSWER


def test_errors_name_the_key_as_the_input_wrote_it() -> None:
    with pytest.raises(EventError) as caught:
        parse_rag_event({"user_input": QUESTION, "retrieved_contexts": "one long string"})
    assert caught.value.message.startswith("'retrieved_contexts' (read as 'contexts') must be a list")
    with pytest.raises(EventError) as caught:
        parse_rag_event({"question": 7, "contexts": CONTEXTS})
    assert caught.value.message == "'question' (read as 'query') must be a string, got a number"
    with pytest.raises(EventError) as caught:
        parse_rag_event({"retrieved_contexts": CONTEXTS})
    assert caught.value.message == "missing required field 'query' (or an alias: 'user_input', 'input' or 'question')"


def test_no_alias_shadows_a_field_or_another_alias() -> None:
    every = [alias for aliases in FIELD_ALIASES.values() for alias in aliases]
    assert len(every) == len(set(every))
    assert not set(every) & set(EVENT_FIELDS)
    assert set(FIELD_ALIASES) <= set(EVENT_FIELDS)


# --- Kafka: format rag_event goes through the same parser ---------------------------------------


def test_kafka_rag_event_reads_a_ragas_style_message() -> None:
    value = json.dumps({"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331",
                        "service": "support-bot", **RAGAS}).encode()
    event = decode_rag_event(value)
    retrieval = retrieval_from_event(event)
    assert retrieval.query == QUESTION
    assert [c.content for c in retrieval.contexts] == CONTEXTS
    assert retrieval.output == ANSWER and retrieval.answer_source == "event"
    assert retrieval.expected_output == REFERENCE
    assert (retrieval.trace_id, retrieval.service) == ("0af7651916cd43dd8448eb211c80319c", "support-bot")


def test_kafka_rag_event_with_answer_has_an_answer_to_judge_against() -> None:
    retrieval = retrieval_from_event(decode_rag_event(json.dumps(CLASSIC | {"ground_truth": None}).encode()))
    assert retrieval.output == ANSWER and retrieval.expected_output is None
    assert retrieval.answer_source == "event"


def test_kafka_rag_event_errors_name_the_alias() -> None:
    with pytest.raises(MessageError) as caught:
        decode_rag_event(json.dumps({"user_input": QUESTION, "retrieved_contexts": {"a": 1}}).encode())
    assert caught.value.reason == "bad_event"
    assert "'retrieved_contexts' (read as 'contexts')" in caught.value.message
