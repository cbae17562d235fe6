"""Retrieval extraction for the four conventions, the answer, and bounds on hostile spans."""
from __future__ import annotations

import json
import time
from typing import Any

import pytest
from ctxprec.collector.assembly.conventions import (
    AttributeMapping,
    ConventionConfig,
    Conventions,
)
from ctxprec.collector.assembly.specs import parse_spec
from ctxprec.collector.assembly.spans import SpanRecord, span_record

from tests.helpers.rag_traces import (
    ANSWER,
    DOCUMENTS,
    QUERY,
    openinference_retriever,
    rag_trace,
    span,
    trace_id,
)


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


def test_answer_is_the_llm_span_whose_input_holds_the_contexts_wherever_it_sits() -> None:
    trace = trace_id(True)
    server = span(trace, "POST /ask", {"http.method": "POST"}, start=1_000, end=9_000)
    chain = span(trace, "retrieve-chain", {}, parent=server.span_id, start=1_050)
    retriever = openinference_retriever(trace, chain.span_id, start=1_100)
    early_llm = span(trace, "rewrite", {"openinference.span.kind": "LLM", "output.value": "too early"},
                     parent=chain.span_id, start=1_000)
    unrelated = span(trace, "title", {"openinference.span.kind": "LLM", "llm.input_messages.0.message.content": "Name it",
                                      "output.value": "a title"}, parent=server.span_id, start=1_200)
    generator = span(trace, "answer", {"openinference.span.kind": "LLM",
                                       "llm.input_messages.0.message.content": f"Context:\n{DOCUMENTS[1]}\nQ: {QUERY}",
                                       "llm.output_messages.0.message.content": "the real answer",
                                       "output.value": json.dumps({"generations": [[{"text": "the real answer"}]]})},
                     parent=server.span_id, start=1_500)
    [found] = Conventions().extract(records([server, chain, retriever, early_llm, unrelated, generator]))
    assert (found.retrieval.output, found.retrieval.answer_source) == ("the real answer", "llm_span")


def test_of_several_consumers_the_last_gives_the_answer_and_containers_are_unwrapped() -> None:
    trace = trace_id(True)
    root = span(trace, "rag", {})
    retriever = openinference_retriever(trace, root.span_id, start=1_100)
    prompt = json.dumps({"messages": [[{"lc": 1, "kwargs": {"content": "Use: " + DOCUMENTS[0]}}]]})
    first = span(trace, "refine-1", {"openinference.span.kind": "LLM", "input.value": prompt,
                                     "output.value": json.dumps({"generations": [[{"text": "draft"}]]})},
                 parent=root.span_id, start=1_200)
    last = span(trace, "refine-2", {"openinference.span.kind": "LLM", "input.value": prompt,
                                    "output.value": json.dumps({"generations": [[{"text": "final answer"}]]})},
                parent=root.span_id, start=1_300)
    [found] = Conventions().extract(records([root, retriever, last, first]))
    assert (found.retrieval.output, found.retrieval.answer_clean) == ("final answer", True)


def test_without_llm_spans_the_outermost_chain_output_is_the_answer() -> None:
    trace = trace_id(True)
    server = span(trace, "POST /ask", {}, start=1_000)
    workflow = span(trace, "QueryEngine.workflow", {"traceloop.entity.output": json.dumps(
        {"response": "chain answer", "metadata": {}})}, parent=server.span_id, start=1_010)
    formatter = span(trace, "format", {"output.value": "\n\n".join(DOCUMENTS)}, parent=workflow.span_id, start=1_020)
    retriever = openinference_retriever(trace, formatter.span_id, start=1_100)
    [found] = Conventions().extract(records([server, workflow, formatter, retriever]))
    assert (found.retrieval.output, found.retrieval.answer_source) == ("chain answer", "chain_output")


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
    ]
    named_only = span(trace, "r1", {"traceloop.entity.name": "retriever", "traceloop.entity.output": "{\"outputs\": 7}"})
    found = Conventions().extract(records([*bad, named_only]))
    # A retriever's name alone does not make a retrieval.
    assert sorted(f.retrieval.span_id for f in found) == sorted(s.span_id.hex() for s in bad)
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
    assert parse_spec("a$.b[1].c").resolve(attrs) == 2
    assert parse_spec("a$.b[*].c").resolve(attrs) == [1, 2]
    assert parse_spec("a$.missing.c").resolve(attrs) is None
    assert parse_spec("a$.b[9]").resolve(attrs) is None
    assert parse_spec("plain").resolve(attrs) == "v"
    assert parse_spec("absent$.x").resolve(attrs) is None


# -- real instrumentors' shapes, one rule each (the real apps run in tests/realtraffic) --

def test_nested_retriever_spans_are_one_retrieval_read_from_the_outer_span_with_documents() -> None:
    trace = trace_id(True)
    outer = openinference_retriever(trace, b"", start=1_100)
    inner = span(trace, "VectorIndexRetriever._retrieve", {
        "openinference.span.kind": "RETRIEVER",
        "input.value": json.dumps({"query_bundle": {"query_str": QUERY, "embedding": None}})},
        parent=outer.span_id, start=1_110)
    [found] = Conventions().extract(records([outer, inner]))
    assert found.retrieval.span_id == outer.span_id.hex()
    assert [c.content for c in found.retrieval.contexts] == DOCUMENTS


def test_nested_retriever_spans_without_documents_are_one_retrieval_without_contexts() -> None:
    trace = trace_id(True)
    outer = span(trace, "retrieve", {"openinference.span.kind": "RETRIEVER", "input.value": QUERY}, start=1_100)
    inner = span(trace, "_retrieve", {"openinference.span.kind": "RETRIEVER"}, parent=outer.span_id, start=1_110)
    sibling = span(trace, "other", {"openinference.span.kind": "RETRIEVER"}, start=1_200)
    found = Conventions().extract(records([outer, inner, sibling]))
    assert [f.retrieval.span_id for f in found] == [outer.span_id.hex(), sibling.span_id.hex()]
    assert found[0].retrieval.query == QUERY and found[0].retrieval.contexts == []


def test_llamaindex_nodes_in_openllmetry_entity_output_as_json_strings() -> None:
    trace = trace_id(True)
    nodes = [json.dumps({"node": {"id_": f"n{i}", "text": doc, "metadata": {}}, "score": 0.5 - i / 10})
             for i, doc in enumerate(DOCUMENTS)]
    outer = span(trace, "VectorIndexRetriever.task", {
        "traceloop.span.kind": "task", "traceloop.entity.name": "VectorIndexRetriever.task",
        "traceloop.entity.input": json.dumps({"str_or_query_bundle": {"query_str": QUERY}}),
        "traceloop.entity.output": json.dumps(nodes)}, start=1_100)
    inner = span(trace, "VectorIndexRetriever.task", {
        "traceloop.span.kind": "task", "traceloop.entity.output": json.dumps(nodes)},
        parent=outer.span_id, start=1_110)
    splitter = span(trace, "TokenTextSplitter.task", {
        "traceloop.span.kind": "task", "traceloop.entity.output": json.dumps(["chunk one", "chunk two"])}, start=1_300)
    workflow = span(trace, "QueryEngine.workflow", {
        "traceloop.span.kind": "workflow", "traceloop.entity.output": json.dumps({"response": "x", "source_nodes": nodes})},
        start=1_000)
    [found] = Conventions().extract(records([workflow, outer, inner, splitter]))
    r = found.retrieval
    assert (r.span_id, r.query, r.convention) == (outer.span_id.hex(), QUERY, "openllmetry")
    assert [(c.content, c.id) for c in r.contexts] == [(d, f"n{i}") for i, d in enumerate(DOCUMENTS)]
    assert r.contexts[0].score == pytest.approx(0.5)


def test_haystack_reprs_and_llamaindex_role_prefix_are_read_as_text() -> None:
    trace = trace_id(True)
    root = span(trace, "Pipeline.run", {})
    retriever = openinference_retriever(trace, root.span_id, start=1_100)
    reply = "ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[TextContent(text='It\\'s under Settings.')], _meta={})"
    llm = span(trace, "Generator.run", {"openinference.span.kind": "LLM",
                                        "input.value": json.dumps({"messages": [DOCUMENTS[0]]}),
                                        "output.value": json.dumps({"replies": [reply]})},
               parent=root.span_id, start=1_200)
    [found] = Conventions().extract(records([root, retriever, llm]))
    assert found.retrieval.output == "It's under Settings."
    chat = span(trace, "CannedLLM.chat", {"openinference.span.kind": "LLM", "output.value": "assistant: Plain answer."},
                parent=root.span_id, start=1_200)
    [found] = Conventions().extract(records([root, retriever, chat]))
    assert found.retrieval.output == "Plain answer."


def test_an_answer_of_unknown_shape_is_used_but_marked_not_clean() -> None:
    trace = trace_id(True)
    root = span(trace, "rag", {})
    retriever = openinference_retriever(trace, root.span_id, start=1_100)
    llm = span(trace, "llm", {"openinference.span.kind": "LLM", "output.value": json.dumps({"weird": {"shape": 1}})},
               parent=root.span_id, start=1_200)
    [found] = Conventions().extract(records([root, retriever, llm]))
    assert found.retrieval.output == json.dumps({"weird": {"shape": 1}})
    assert (found.retrieval.answer_source, found.retrieval.answer_clean) == ("llm_span", False)


def test_no_llm_span_and_no_chain_output_means_no_answer() -> None:
    trace = trace_id(True)
    server = span(trace, "POST /ask", {"http.method": "POST"})
    retriever = openinference_retriever(trace, server.span_id, start=1_100)
    [found] = Conventions().extract(records([server, retriever]))
    assert (found.retrieval.output, found.retrieval.answer_source) == (None, "none")


def test_each_retrieval_gets_the_llm_call_that_consumed_its_own_contexts() -> None:
    trace = trace_id(True)
    root = span(trace, "agent", {})
    first = openinference_retriever(trace, root.span_id, ["Paris is the capital of France."], query="capital?",
                                    start=1_100)
    second = openinference_retriever(trace, root.span_id, ["The Seine flows through Paris."], query="river?",
                                     start=1_150)
    answer_second = span(trace, "llm-2", {"openinference.span.kind": "LLM",
                                          "llm.input_messages.0.message.content": "Use: The Seine flows through Paris.",
                                          "llm.output_messages.0.message.content": "The Seine."},
                         parent=root.span_id, start=1_300)
    answer_first = span(trace, "llm-1", {"openinference.span.kind": "LLM",
                                         "llm.input_messages.0.message.content": "Use: Paris is the capital of France.",
                                         "llm.output_messages.0.message.content": "Paris."},
                        parent=root.span_id, start=1_200)
    found = Conventions().extract(records([root, first, second, answer_second, answer_first]))
    assert {f.retrieval.query: f.retrieval.output for f in found} == {"capital?": "Paris.", "river?": "The Seine."}
