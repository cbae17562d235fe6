"""Retrieval extraction for the four conventions, the answer, and bounds on hostile spans."""
from __future__ import annotations

import json
import time
from typing import Any

import pytest

from ctxprec.collector.assembly.conventions import AttributeMapping, ConventionConfig, Conventions, resolve
from ctxprec.collector.assembly.spans import SpanRecord, span_record
from tests.helpers.rag_traces import ANSWER, DOCUMENTS, QUERY, openinference_retriever, rag_trace, span, trace_id


def records(spans: list[Any], service: str = "support-bot", max_chars: int = 20_000) -> list[SpanRecord]:
    return [span_record(s, service, max_chars) for s in spans]


def test_openinference_retrieval_with_answer_from_following_llm_span() -> None:
    trace = trace_id(True)
    spans = rag_trace(trace)
    [found] = Conventions().extract(records(spans))
    r = found.retrieval
    assert r.convention == "openinference"
    assert r.trace_id == trace.hex() and r.span_id == spans[1].span_id.hex()
    assert r.service == "support-bot"
    assert r.query == QUERY
    assert [c.content for c in r.contexts] == DOCUMENTS
    assert [c.id for c in r.contexts] == ["doc-0", "doc-1", "doc-2"]
    assert r.contexts[1].score == pytest.approx(0.9)
    assert r.output == ANSWER
    assert r.retriever == "retrieve"
    assert r.end_time_unix_nano == spans[1].end_time_unix_nano
    assert "retrieval.documents.0.document.content" not in r.attributes  # documents stay out of rule attributes
    assert r.attributes["openinference.span.kind"] == "RETRIEVER"


def test_documents_are_ordered_by_numeric_index_not_attribute_order() -> None:
    trace = trace_id(True)
    attrs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": QUERY}
    for i in reversed(range(12)):  # 10 and 11 must come after 9
        attrs[f"retrieval.documents.{i}.document.content"] = f"doc number {i}"
    attrs["retrieval.documents.3.document.metadata"] = json.dumps({"source": "faq.md"})
    [found] = Conventions().extract(records([span(trace, "retrieve", attrs)]))
    assert [c.content for c in found.retrieval.contexts] == [f"doc number {i}" for i in range(12)]
    assert found.retrieval.contexts[3].metadata == {"source": "faq.md"}


def test_answer_falls_back_to_root_output_when_no_llm_follows_under_same_parent() -> None:
    trace = trace_id(True)
    root = span(trace, "rag", {"output.value": "root answer"}, start=1_000, end=9_000)
    chain = span(trace, "retrieve-chain", {}, parent=root.span_id, start=1_050)
    retriever = openinference_retriever(trace, chain.span_id, start=1_100)
    early_llm = span(trace, "llm-before", {"openinference.span.kind": "LLM", "output.value": "too early"},
                     parent=chain.span_id, start=1_000)
    other_parent_llm = span(trace, "llm-elsewhere", {"openinference.span.kind": "LLM", "output.value": "elsewhere"},
                            parent=root.span_id, start=1_500)
    [found] = Conventions().extract(records([root, chain, retriever, early_llm, other_parent_llm]))
    assert found.retrieval.output == "root answer"


def test_first_following_llm_wins_and_genai_output_messages_are_read() -> None:
    trace = trace_id(True)
    root = span(trace, "rag", {})
    retriever = openinference_retriever(trace, root.span_id, start=1_100)
    messages = [{"role": "assistant", "parts": [{"type": "text", "content": "from gen_ai messages"}]}]
    first = span(trace, "chat", {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(messages)},
                 parent=root.span_id, start=1_300)
    second = span(trace, "chat2", {"openinference.span.kind": "LLM", "output.value": "later"},
                  parent=root.span_id, start=1_600)
    [found] = Conventions().extract(records([second, root, retriever, first]))
    assert found.retrieval.output == "from gen_ai messages"


def test_genai_convention_with_openllmetry_completion_answer() -> None:
    trace = trace_id(True)
    root = span(trace, "rag", {})
    docs = [{"id": "a", "content": "alpha", "score": 0.9}, {"text": "beta"}, {"no_text": True}, "gamma"]
    retriever = span(trace, "vector search", {"gen_ai.operation.name": "retrieval",
                                              "gen_ai.retrieval.query.text": "greek letters?",
                                              "gen_ai.retrieval.documents": json.dumps(docs)},
                     parent=root.span_id, start=1_100)
    llm = span(trace, "openai.chat", {"llm.request.type": "chat", "gen_ai.completion.1.content": "second",
                                      "gen_ai.completion.0.content": "first"}, parent=root.span_id, start=1_200)
    [found] = Conventions().extract(records([root, retriever, llm]))
    r = found.retrieval
    assert r.convention == "genai"
    assert r.query == "greek letters?"
    assert [c.content for c in r.contexts] == ["alpha", "beta", "gamma"]
    assert r.contexts[0].id == "a" and r.contexts[0].score == 0.9
    assert r.output == "first\nsecond"


def test_openllmetry_db_query_result_events_in_event_order() -> None:
    trace = trace_id(True)
    events = [("db.query.result", {"db.query.result.document": f"chunk {i}", "db.query.result.id": f"c{i}",
                                   "db.query.result.distance": 0.1 * i}) for i in range(3)]
    events.insert(1, ("db.query.embeddings", {"db.query.embeddings.vector": "[0.1]"}))
    retriever = span(trace, "chroma.query", {"db.system": "chroma", "db.query.text": "what chunks?"}, events=events)
    [found] = Conventions().extract(records([retriever]))
    r = found.retrieval
    assert r.convention == "openllmetry"
    assert [c.content for c in r.contexts] == ["chunk 0", "chunk 1", "chunk 2"]
    assert [c.id for c in r.contexts] == ["c0", "c1", "c2"]
    assert r.query == "what chunks?"


def test_openllmetry_langchain_retriever_entity_json() -> None:
    trace = trace_id(True)
    output = {"outputs": [
        {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "document", "Document"],
         "kwargs": {"page_content": "lc doc one", "metadata": {"source": "one.md"}}},
        {"page_content": "lc doc two", "metadata": {}},
    ]}
    retriever = span(trace, "VectorStoreRetriever.task", {
        "traceloop.entity.name": "VectorStoreRetriever",
        "traceloop.entity.input": json.dumps({"inputs": {"query": "langchain question"}}),
        "traceloop.entity.output": json.dumps(output)})
    not_retriever = span(trace, "LLMChain.task", {"traceloop.entity.name": "LLMChain",
                                                  "traceloop.entity.output": json.dumps({"outputs": ["x"]})})
    [found] = Conventions().extract(records([retriever, not_retriever]))
    assert found.retrieval.query == "langchain question"
    assert [c.content for c in found.retrieval.contexts] == ["lc doc one", "lc doc two"]
    assert found.retrieval.contexts[0].metadata == {"source": "one.md"}


def test_user_mapping_with_json_paths_and_configurable_order() -> None:
    trace = trace_id(True)
    attrs = {"app.request": json.dumps({"question": "mapped question"}),
             "app.hits": json.dumps({"documents": [{"body": "m1"}, {"body": "m2"}]}),
             "app.answer": "mapped answer",
             "openinference.span.kind": "RETRIEVER", "input.value": "oi question",
             "retrieval.documents.0.document.content": "oi doc"}
    mapping = AttributeMapping(query="app.request$.question", contexts="app.hits$.documents[*].body",
                               output="app.answer")
    spans = records([span(trace, "search", attrs)])
    [default_first] = Conventions(ConventionConfig(mapping=mapping)).extract(spans)
    assert default_first.retrieval.convention == "openinference"
    [mapped] = Conventions(ConventionConfig(order=("mapping", "openinference"), mapping=mapping)).extract(spans)
    r = mapped.retrieval
    assert r.convention == "mapping"
    assert r.query == "mapped question"
    assert [c.content for c in r.contexts] == ["m1", "m2"]
    assert r.output == "mapped answer"


def test_user_mapping_with_indexed_keys() -> None:
    trace = trace_id(True)
    attrs = {"q": "indexed", **{f"docs.{i}.text": f"d{i}" for i in range(5)}}
    mapping = AttributeMapping(query="q", contexts="docs.{i}.text")
    config = ConventionConfig(order=("mapping",), mapping=mapping, max_contexts=3)
    [found] = Conventions(config).extract(records([span(trace, "s", attrs)]))
    assert [c.content for c in found.retrieval.contexts] == ["d0", "d1", "d2"]
    assert found.dropped_contexts == 2


def test_retriever_name_expected_output_and_service() -> None:
    trace = trace_id(True)
    root = span(trace, "rag", {"app.expected": "the reference answer"})
    retriever = openinference_retriever(trace, root.span_id)
    retriever.attributes.add(key="retriever.name").value.string_value = "kb-v2"
    config = ConventionConfig(retriever_attribute="retriever.name", expected_output_attribute="app.expected")
    [found] = Conventions(config).extract(records([root, retriever], service="billing"))
    assert found.retrieval.retriever == "kb-v2"
    assert found.retrieval.expected_output == "the reference answer"
    assert found.retrieval.service == "billing"


def test_ten_thousand_contexts_are_capped_and_counted_quickly() -> None:
    trace = trace_id(True)
    attrs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": QUERY}
    for i in range(10_000):
        attrs[f"retrieval.documents.{i}.document.content"] = f"context {i}"
        attrs[f"retrieval.documents.{i}.document.id"] = str(i)
    hostile = span(trace, "retrieve", attrs)
    started = time.perf_counter()
    [found] = Conventions().extract(records([hostile]))
    assert time.perf_counter() - started < 5.0
    assert len(found.retrieval.contexts) == 100
    assert found.retrieval.contexts[-1].content == "context 99"
    assert found.dropped_contexts == 9_900


def test_huge_attribute_values_are_cut() -> None:
    trace = trace_id(True)
    hostile = openinference_retriever(trace, b"", ["x" * 1_000_000], query="q" * 500_000)
    [found] = Conventions().extract(records([hostile], max_chars=10_000))
    assert len(found.retrieval.contexts[0].content) == 10_000
    assert len(found.retrieval.query) == 10_000


def test_malformed_json_yields_no_contexts_not_an_exception() -> None:
    trace = trace_id(True)
    bad = [
        span(trace, "g1", {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": "[{broken"}),
        span(trace, "g2", {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": "[" * 50_000}),
        span(trace, "g3", {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": 42}),
        span(trace, "r1", {"traceloop.entity.name": "retriever", "traceloop.entity.output": "{\"outputs\": 7}"}),
    ]
    found = Conventions().extract(records(bad))
    assert [f.retrieval.span_id for f in found] == [s.span_id.hex() for s in bad]
    assert all(f.retrieval.contexts == [] for f in found)


def test_spans_without_a_convention_are_not_retrievals() -> None:
    trace = trace_id(True)
    plain = [span(trace, "GET /", {"http.method": "GET"}),
             span(trace, "kind lowercase", {"openinference.span.kind": "retriever"}),
             span(trace, "chat", {"gen_ai.operation.name": "chat"})]
    assert Conventions().extract(records(plain)) == []


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="unknown convention"):
        ConventionConfig(order=("openinference", "langfuse"))
    with pytest.raises(ValueError, match="max_contexts"):
        ConventionConfig(max_contexts=0)


def test_resolve_paths() -> None:
    attrs = {"a": json.dumps({"b": [{"c": 1}, {"c": 2}]}), "plain": "v"}
    assert resolve(attrs, "a$.b[1].c") == 2
    assert resolve(attrs, "a$.b[*].c") == [1, 2]
    assert resolve(attrs, "a$.missing.c") is None
    assert resolve(attrs, "a$.b[9]") is None
    assert resolve(attrs, "plain") == "v"
    assert resolve(attrs, "absent$.x") is None
