"""The rules behind the tool convention, re-rankers, DSPy answers and content capture off, one
shape at a time (the captured traffic of real apps is read in test_captured_spans.py): which tool
results are documents, where the question is among a call's arguments, what `conventions.tools`
changes, which re-ranked list is scored, and when a retrieval without documents is `no_content`.
Every shape is also counted, unsampled, from the request bytes: one decision per retrieval."""
from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from ctxprec.collector.assembly.answers import unframed
from ctxprec.collector.assembly.conventions import ConventionConfig, Conventions
from ctxprec.collector.assembly.documents import argument_query, tool_documents
from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest
from ctxprec.collector.assembly.spans import span_record
from ctxprec.collector.components import shutdown
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.sampling.sampler import Sampler

from tests.helpers.rag_traces import CollectingSink, request_of, span, trace_id

QUERY = "How do I reset my password?"
TEXTS = ["Open Settings > Security and choose Reset password.", "Office hours are 9-5."]
FIELDS = ("query", "q", "question", "search", "text")


def genai_tool(name: str, result: Any, arguments: Any = None, **extra: Any) -> dict[str, Any]:
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                  "gen_ai.tool.call.arguments": json.dumps(arguments if arguments is not None else {"query": QUERY})}
    if result is not None:
        attributes["gen_ai.tool.call.result"] = result if isinstance(result, str) else json.dumps(result)
    return attributes | extra


def read(attributes: dict[str, Any], config: ConventionConfig | None = None, name: str = "tool") -> list[Any]:
    trace = trace_id(True)
    return Conventions(config).extract([span_record(span(trace, name, attributes), "svc", 20_000)])


async def decisions(attributes: dict[str, Any], config: ConventionConfig | None = None) -> tuple[int, int]:
    """(retrievals handed on when sampled, retrievals counted not_sampled when not)."""
    out = []
    for rate in (1.0, 0.0):
        sink = CollectingSink()
        ingest = OtlpIngest(keep_trace=Sampler(rate).keep_trace, sink=sink, metrics=Metrics(),
                            settings=IngestSettings(conventions=config or ConventionConfig()))
        request = request_of([span(trace_id(True), "tool", attributes)])
        await ingest.ingest(request, receiver="otlp_http", raw=request.SerializeToString())
        await shutdown(ingest, 0.0)
        out.append(len(sink.retrievals) if rate else sum(sink.not_sampled_counts.values()))
    return out[0], out[1]


@pytest.mark.parametrize(("result", "texts"), [
    (TEXTS, TEXTS),  # a list of texts
    ([{"id": "a", "content": TEXTS[0], "score": 0.9}, {"id": "b", "content": TEXTS[1]}], TEXTS),
    ({"results": [{"snippet": TEXTS[0], "url": "https://x"}, {"passage": TEXTS[1]}]}, TEXTS),  # under a container
    ({"result": [{"chunk": TEXTS[0]}, {"text": TEXTS[1]}]}, TEXTS),  # Google ADK wraps a list as {"result": [...]}
    (str([{"id": "a", "content": TEXTS[0]}, {"id": "b", "content": TEXTS[1]}]), TEXTS),  # str() of a list (SK)
    ([json.dumps({"content": TEXTS[0]}), json.dumps({"content": TEXTS[1]})], TEXTS),  # JSON strings of objects
])
async def test_a_list_of_documents_is_a_retrieval(result: Any, texts: list[str]) -> None:
    [found] = read(genai_tool("search", result))
    assert found.retrieval.convention == "tool" and found.retrieval.query == QUERY
    assert [c.content for c in found.retrieval.contexts] == texts
    assert await decisions(genai_tool("search", result)) == (1, 1)


@pytest.mark.parametrize("result", [
    {"city": "Paris", "temperature": 21, "conditions": "sunny"},  # weather
    "42",  # a calculator
    "It is sunny in Paris.",  # one text
    [1, 2, 3],  # numbers
    [{"id": "a", "score": 0.9}],  # objects without text
    [{"day": "Mon", "temperature": 21}],  # objects of another shape
    [],  # nothing recorded as documents
    [TEXTS[0], {"temperature": 21}],  # a mixed list
    "[not a list",
])
async def test_any_other_result_is_never_a_retrieval(result: Any) -> None:
    assert read(genai_tool("weather", result)) == []
    assert await decisions(genai_tool("weather", result)) == (0, 0)


def test_openinference_tool_spans_read_input_and_output_values() -> None:
    # smolagents and CrewAI bind the call's arguments: {"args": [...], "kwargs": {...}}.
    attributes = {"openinference.span.kind": "TOOL", "tool.name": "kb",
                  "input.value": json.dumps({"args": [], "sanitize_inputs_outputs": False, "kwargs": {"q": QUERY}}),
                  "output.value": json.dumps(TEXTS)}
    [found] = read(attributes)
    assert (found.retrieval.query, [c.content for c in found.retrieval.contexts]) == (QUERY, TEXTS)


@pytest.mark.parametrize(("arguments", "query"), [
    ({"query": QUERY, "top_k": 3}, QUERY),
    ({"search": QUERY, "filter": "faq"}, QUERY),  # named like a query first
    ({"keywords": QUERY, "top_k": 3}, QUERY),  # the only text argument
    ({"a": "x", "b": "y"}, ""),  # two texts, none named like a query
    (QUERY, QUERY),  # plain text
    ({"kwargs": {"question": QUERY}}, QUERY),
    ("{'query': 'How do I reset my password?'}", QUERY),  # a Python literal
])
def test_the_query_comes_from_the_arguments(arguments: Any, query: str) -> None:
    value = arguments if isinstance(arguments, str) else json.dumps(arguments)
    assert argument_query(value, FIELDS) == query


async def test_include_takes_a_tool_whatever_its_result_and_exclude_never() -> None:
    include = ConventionConfig(tools={"include": ["kb_*"]})
    [found] = read(genai_tool("kb_lookup", "Reset it under Settings > Security."), include)
    assert [c.content for c in found.retrieval.contexts] == ["Reset it under Settings > Security."]
    [found] = read(genai_tool("kb_lookup", {"articles": [{"body": "x", "text": TEXTS[0]}]}), include)
    assert [c.content for c in found.retrieval.contexts] == [TEXTS[0]]  # the list inside the object
    assert await decisions(genai_tool("kb_lookup", "one text"), include) == (1, 1)
    # Taken with nothing recorded at all (content capture off): no_content, not no_contexts.
    [found] = read(genai_tool("kb_lookup", None, arguments={}) | {"gen_ai.tool.call.arguments": ""}, include)
    assert (found.retrieval.contexts, found.retrieval.documents_without_text) == ([], 1)
    exclude = ConventionConfig(tools={"exclude": ["search"]})
    assert read(genai_tool("search", TEXTS), exclude) == []
    assert await decisions(genai_tool("search", TEXTS), exclude) == (0, 0)
    off = ConventionConfig(tools={"mode": "off"})
    assert read(genai_tool("search", TEXTS), off) == []
    assert await decisions(genai_tool("search", TEXTS), off) == (0, 0)


def test_a_tool_around_a_retriever_span_is_one_retrieval_read_from_the_retriever() -> None:
    trace = trace_id(True)
    tool = span(trace, "tool", genai_tool("search", TEXTS), start=1_000, end=3_000)
    inner = {"openinference.span.kind": "RETRIEVER", "input.value": QUERY}
    for i, text in enumerate(TEXTS):
        inner[f"retrieval.documents.{i}.document.content"] = text
    retriever = span(trace, "retrieve", inner, parent=tool.span_id, start=1_100, end=1_200)
    [found] = Conventions().extract([span_record(s, "svc", 20_000) for s in (tool, retriever)])
    assert found.retrieval.convention == "openinference"
    # Unsampled, the bytes' exact count (the RETRIEVER) and the tool's look agree: one.
    for rate in (1.0, 0.0):
        sink = CollectingSink()
        ingest = OtlpIngest(keep_trace=Sampler(rate).keep_trace, sink=sink, metrics=Metrics())
        request = request_of([tool, retriever])
        asyncio.run(_ingest_once(ingest, request))
        assert len(sink.retrievals) + sum(sink.not_sampled_counts.values()) == 1


async def _ingest_once(ingest: OtlpIngest, request: Any) -> None:
    await ingest.ingest(request, receiver="otlp_http", raw=request.SerializeToString())
    await shutdown(ingest, 0.0)


def test_tool_documents_bounds_the_shapes() -> None:
    assert tool_documents(json.dumps(TEXTS)) == TEXTS
    assert tool_documents(" ") is None and tool_documents(["", "x"]) is None


# -- re-rankers: the list the model saw --

def _retriever(trace: bytes, parent: bytes, ids: list[str]) -> Any:
    attributes: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": QUERY}
    for i, doc in enumerate(ids):
        attributes[f"retrieval.documents.{i}.document.content"] = f"text of {doc}"
        attributes[f"retrieval.documents.{i}.document.id"] = doc
    return span(trace, "retrieve", attributes, parent=parent, start=1_100, end=1_200)


def test_an_openinference_reranker_after_the_retriever_gives_the_order_and_subset() -> None:
    trace = trace_id(True)
    root = span(trace, "query", {"openinference.span.kind": "CHAIN"}, start=1_000, end=9_000)
    rerank = {"openinference.span.kind": "RERANKER", "reranker.output_documents.0.document.id": "c",
              "reranker.output_documents.1.document.id": "a"}
    spans = [root, _retriever(trace, root.span_id, ["a", "b", "c"]),
             span(trace, "rerank", rerank, parent=root.span_id, start=1_300, end=1_400)]
    [found] = Conventions().extract([span_record(s, "svc", 20_000) for s in spans])
    assert [c.id for c in found.retrieval.contexts] == ["c", "a"]
    assert [c.position for c in found.retrieval.contexts] == [2, 0]  # still the retrieval span's documents


def test_a_node_postprocessor_listing_node_ids_gives_the_list_and_others_do_not() -> None:
    trace = trace_id(True)
    root = span(trace, "query", {"openinference.span.kind": "CHAIN"}, start=1_000, end=9_000)
    nodes = ("[NodeWithScore(node=TextNode(id_='b', embedding=None, text='text of b'), score=9.0), "
             "NodeWithScore(node=TextNode(id_='a', embedding=None, text='text of a'), score=8.0)]")
    unknown = "[NodeWithScore(node=TextNode(id_='z', text='elsewhere'), score=1.0)]"
    spans = [root, _retriever(trace, root.span_id, ["a", "b", "c"]),
             span(trace, "LLMRerank.postprocess_nodes", {"openinference.span.kind": "CHAIN", "output.value": nodes},
                  parent=root.span_id, start=1_300, end=1_400),
             # ids the retrieval does not hold (another retrieval's): ignored
             span(trace, "other", {"output.value": unknown}, parent=root.span_id, start=1_500, end=1_600)]
    [found] = Conventions().extract([span_record(s, "svc", 20_000) for s in spans])
    assert [c.id for c in found.retrieval.contexts] == ["b", "a"]
    # Before the retrieval, or outside its parent: not its re-ranker.
    early = span(trace, "early", {"output.value": nodes}, parent=root.span_id, start=900, end=950)
    [found] = Conventions().extract([span_record(s, "svc", 20_000) for s in [root, spans[1], early]])
    assert [c.id for c in found.retrieval.contexts] == ["a", "b", "c"]


# -- answers --

def test_dspy_framing_is_removed_and_the_parsed_field_preferred() -> None:
    framed = "[[ ## reasoning ## ]]\nBecause.\n\n[[ ## answer ## ]]\nOpen Settings.\n\n[[ ## completed ## ]]"
    assert unframed(framed) == "Open Settings."
    assert unframed(framed, lambda: [{"reasoning": "Because.", "answer": "Open Settings > Security."}]) == \
        "Open Settings > Security."
    assert unframed("[[ ## answer ## ]]\n42\n\n[[ ## completed ## ]]", lambda: [{"answer": 42}]) == "42"
    assert unframed("No markers here.") is None


def test_a_message_written_as_content_and_as_parts_is_one_answer() -> None:
    trace = trace_id(True)
    answer = "Open Settings > Security."
    llm = {"openinference.span.kind": "LLM", "input.value": TEXTS[0],
           "llm.output_messages.0.message.role": "assistant",
           "llm.output_messages.0.message.content": answer,
           "llm.output_messages.0.message.contents.0.message_content.type": "text",
           "llm.output_messages.0.message.contents.0.message_content.text": answer}
    spans = [span(trace, "tool", genai_tool("search", TEXTS), start=1_000, end=1_100),
             span(trace, "llm", llm, start=1_200, end=1_300)]
    [found] = Conventions().extract([span_record(s, "svc", 20_000) for s in spans])
    assert found.retrieval.output == answer


# -- content capture off --

@pytest.mark.parametrize(("attributes", "without_text"), [
    ({"gen_ai.operation.name": "retrieval"}, 1),  # nothing recorded: content capture off
    ({"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": QUERY}, 0),  # a query, no documents
    ({"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": QUERY,
      "gen_ai.retrieval.documents": "[]"}, 0),  # an empty list, recorded: no_contexts
    ({"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": '[{"id": "d1", "score": 0.9}]'}, 1),
])
def test_no_content_only_when_nothing_or_no_text_was_recorded(attributes: dict[str, Any], without_text: int) -> None:
    [found] = read(attributes)
    assert found.retrieval.contexts == [] and found.retrieval.documents_without_text == without_text


def test_only_resources_with_tool_spans_are_looked_at() -> None:
    """The tool convention's markers are the tool-call attributes: traffic without tool spans
    keeps its exact byte count (no decoding), a resource with one is looked at."""
    from ctxprec.collector.assembly.markers import MarkerScanner

    scanner = MarkerScanner(ConventionConfig().rules())
    retriever = {"openinference.span.kind": "RETRIEVER", "input.value": QUERY,
                 "retrieval.documents.0.document.content": TEXTS[0]}
    plain = request_of([span(trace_id(True), "retrieve", retriever)]).SerializeToString()
    [count] = scanner.scan(plain, [(0, len(plain))])
    assert (count.total, count.needs_look) == (1, False)
    for tool in (genai_tool("weather", {"temperature": 21}),
                 {"openinference.span.kind": "TOOL", "tool.name": "kb", "output.value": "x"}):
        mixed = request_of([span(trace_id(True), "retrieve", retriever), span(trace_id(True), "tool", tool)])
        data = mixed.SerializeToString()
        [count] = scanner.scan(data, [(0, len(data))])
        assert count.needs_look
