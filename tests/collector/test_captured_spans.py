"""Spans that real instrumentors emitted (captured OTLP requests, tests/fixtures/otlp/README.md)
read by assembly: Mastra's vector tools (core 1.70 and 1.71), the Vercel AI SDK 6 and 7 (both
@ai-sdk/otel integrations) after a retrieval span the app wrote, OpenInference's GenAI dual
write with and without document text, LlamaIndex's index build under OpenLLMetry, Mastra
shapes read by `conventions.mappings`, agent tools (Pydantic AI's own instrumentation with
and without OpenInference's span processor, the OpenAI Agents SDK under OpenInference with the
Responses and the Chat Completions API, a tool that is not a retriever), and OpenTelemetry
GenAI retrieval spans with content capture on and off.

Each request goes through the receiver's decoder and `OtlpIngest`: sampled, every retrieval is
found once with its contexts in rank order, its query and the answer the mock model returned;
unsampled, the byte-level count gives the same number of retrievals.
"""
from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from ctxprec.collector.assembly.conventions import ConventionConfig, Conventions
from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest
from ctxprec.collector.assembly.spans import span_record
from ctxprec.collector.components import shutdown
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision, Retrieval
from ctxprec.collector.receivers.otlp_decode import decode_export_request
from ctxprec.collector.sampling.sampler import Sampler
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.helpers.rag_traces import CollectingSink
from tests.realtraffic.apps.corpus import DOC_BY_ID, QUESTIONS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "otlp"
RUNS = FIXTURES.parent / "agent_runs"
_TRACES = re.compile(r"^\d+\.(pb|json)$")  # logs-NNN.pb and metrics-NNN.pb are other signals
QUERY = "How do I reset my password?"
DOCS = ["To reset your password, open Settings > Security and choose Reset password.",
        "Our office is closed on public holidays.",
        "A reset link is emailed to you and expires after 24 hours."]
ANSWER = "Open Settings > Security, choose Reset password and follow the emailed link."
IDS = ["doc-0", "doc-1", "doc-2"]


@dataclass(frozen=True)
class Expected:
    convention: str
    contexts: list[str]
    ids: list[str | None]
    answer: str | None
    query: str = QUERY
    without_text: int = 0
    span_name: str | None = None
    answer_source: str = "llm_span"


def _mastra(span: str = "execute_tool searchDocs", ids: list[str] | None = None) -> Expected:
    # The vector store ranks by similarity: doc-2, doc-1, doc-0 for the probe's fake embedding.
    return Expected("mastra", DOCS[::-1], ids or IDS[::-1], ANSWER, span_name=span)


def _app_retrieval(convention: str, answers: list[str]) -> list[Expected]:
    return [Expected(convention, DOCS, list(IDS), answer, span_name="retrieve") for answer in answers]


def _agent_runs(name: str, convention: str, span: str, *, ids: bool = True,
                answer_source: str = "llm_span") -> list[Expected]:
    """What the app's run report says each question retrieved and was answered (`ids`: the spans
    carry the documents' ids)."""
    report = json.loads((RUNS / f"{name}.json").read_text())
    return [Expected(convention, run["contexts"], run["context_ids"] if ids else [], run["answer"], run["query"],
                     span_name=span, answer_source=answer_source) for run in report["runs"]]


OBJECT_ANSWER = '{"answer":"' + ANSWER + '"}'
CORPUS = [Expected("openinference", [DOC_BY_ID[i].text for i in q.retrieved_ids], [None] * 3, q.answer, q.text,
                   span_name="VectorStoreRetriever") for q in QUESTIONS]
CASES: dict[str, list[Expected]] = {
    "mastra171-vector": [_mastra()],
    "mastra170-vector": [_mastra()],
    # Both retrievals are answered by the last turn, not by the tool-calling turn between (empty text).
    "mastra171-vector-twice": [_mastra(), Expected("mastra", [DOCS[0], DOCS[2], DOCS[1]], ["doc-0", "doc-2", "doc-1"],
                                                   ANSWER, "reset link expiry", span_name="execute_tool searchDocs")],
    "mastra171-graph": [],  # filled in below: a random walk ranks the documents
    "ai6-openinference": _app_retrieval("openinference", [ANSWER, ANSWER, OBJECT_ANSWER]),
    "ai7-otel-openinference": _app_retrieval("openinference", [ANSWER, ANSWER, OBJECT_ANSWER]),
    "ai7-legacy-genai": _app_retrieval("genai", [ANSWER, ANSWER, OBJECT_ANSWER]),
    "langchain-openinference-genai": CORPUS,
    # Documents hidden: the answer is still read (a resolver may give the documents their text).
    "langchain-openinference-genai-hidden": [Expected("openinference", [], [], q.answer, q.text, without_text=3,
                                                      span_name="VectorStoreRetriever") for q in QUESTIONS],
    # The index build (SentenceSplitter, embeddings) is no retrieval: only the query's retriever.
    "llamaindex-openllmetry-indexbuild": [
        Expected("openllmetry", [DOC_BY_ID[i].text for i in QUESTIONS[0].retrieved_ids], [], QUESTIONS[0].answer,
                 QUESTIONS[0].text, span_name="VectorIndexRetriever.task")],
    # Shapes the app chose: nothing is read without a mapping.
    "mastra171-workflow": [],
    "mastra171-tool": [],
    # Agent apps (tests/realtraffic/agents): each question's retrieval tool once, the weather tool
    # never; expected values from the run's own report (tests/fixtures/agent_runs/).
    "pydantic-ai-genai": _agent_runs("pydantic-ai-genai", "tool", "execute_tool search_docs"),
    "pydantic-ai-openinference": _agent_runs("pydantic-ai-openinference", "tool", "execute_tool search_docs"),
    "pydantic-ai-weather": [],
    "openai-agents-responses": _agent_runs("openai-agents-responses", "tool", "search_docs"),
    "openai-agents-chat": _agent_runs("openai-agents-chat", "tool", "search_docs"),
    # The tool marked RETRIEVER (`tool_span_kinds`): OpenInference's documents; the Responses API
    # message's answer, under `content` and `contents.0`, is read once.
    "openai-agents-retriever": _agent_runs("openai-agents-retriever", "openinference", "search_docs"),
    # OpenTelemetry GenAI with content on the span; with content capture off the retrieval spans
    # carry neither query nor documents: no_content, not no_contexts (below).
    "otel-genai-span": _agent_runs("otel-genai-span", "genai", "retrieval"),
    "otel-genai-off": [Expected("genai", [], [], None, "", without_text=1, span_name="retrieval")] * 3,
    # Declared by gen_ai.operation.name, which the genai convention (first in order) reads too.
    "langchain-openllmetry-nocontent": [Expected("genai", [], [], None, "", without_text=1,
                                                 span_name="vector_db_retrieve VectorStoreRetriever")] * 3,
    # No LLM span in ADK's trace (the model call is in its log records): the agent run's output
    # (an ADK Event, the text in its Gemini-style parts).
    "google-adk-openinference": _agent_runs("google-adk-openinference", "tool", "execute_tool search_docs",
                                            answer_source="chain_output"),
    # ADK's own spans with content on the span: the tool's GenAI result, the answer of the
    # generate_content span after it.
    "google-adk-native": _agent_runs("google-adk-native", "tool", "execute_tool search_docs"),
    "crewai-openinference": _agent_runs("crewai-openinference", "tool", "search_docs.run"),
    # smolagents answers through its `final_answer` tool: the model's last turn only calls it,
    # so the agent's output is the answer.
    "smolagents-openinference": _agent_runs("smolagents-openinference", "tool", "SimpleTool",
                                            answer_source="chain_output"),
    # LLMRerank keeps 2 of the retriever's 3, in its own order: those are scored.
    "llamaindex-rerank-openinference": _agent_runs("llamaindex-rerank-openinference", "openinference",
                                                   "VectorIndexRetriever.retrieve"),
    # The answer without DSPy's [[ ## answer ## ]] framing.
    "dspy-openinference": _agent_runs("dspy-openinference", "openinference", "Retrieve.forward", ids=False),
}

def _graph_result() -> Expected:
    """GraphRAG ranks by a random walk: the captured run's order is the tool result's own."""
    [tool] = [s for request, _ in requests("mastra171-graph") for rs in request.resource_spans
              for ss in rs.scope_spans for s in ss.spans if s.name == "execute_tool searchDocs"]
    [result] = [json.loads(kv.value.string_value) for kv in tool.attributes if kv.key == "gen_ai.tool.call.result"]
    assert sorted(result["relevantContext"]) == sorted(DOCS)
    return Expected("mastra", result["relevantContext"], [s["id"] for s in result["sources"]], ANSWER,
                    span_name="execute_tool searchDocs")


def documented_mappings() -> str:
    """The `conventions.mappings` example of docs/CONFIG.md (a Mastra workflow's retrieve step):
    the example users copy is the one tested."""
    from ctxprec.collector.config_docs import STRUCTURES

    block = STRUCTURES.split("```yaml", 1)[1].split("```", 1)[0]
    return yaml.safe_dump(yaml.safe_load(textwrap.dedent(block))["conventions"])


WORKFLOW_MAPPINGS = documented_mappings()
TOOL_MAPPINGS = """
mappings:
  - name: lookup-tool
    when: {span.name: execute_tool lookup}
    query: gen_ai.tool.call.arguments$.question
    contexts: gen_ai.tool.call.result$.articles[*].body
    ids: gen_ai.tool.call.result$.articles[*].articleId
"""


def requests(name: str) -> list[tuple[ExportTraceServiceRequest, bytes | None]]:
    out = []
    for path in sorted(p for p in (FIXTURES / name).iterdir() if _TRACES.match(p.name)):
        body = path.read_bytes()
        content_type = "application/json" if path.suffix == ".json" else "application/x-protobuf"
        request = decode_export_request(body, content_type=content_type, content_encoding=None, max_bytes=1 << 24)
        out.append((request, body if path.suffix == ".pb" else None))
    return out


async def ingest_all(name: str, rate: float, config: ConventionConfig | None = None) -> CollectingSink:
    sink = CollectingSink()
    ingest = OtlpIngest(keep_trace=Sampler(rate).keep_trace, sink=sink, metrics=Metrics(),
                        settings=IngestSettings(conventions=config or ConventionConfig()))
    for request, raw in requests(name):
        await ingest.ingest(request, receiver="otlp_http", raw=raw)
    await shutdown(ingest, 0.0)  # hands every buffered (sampled) trace to the sink
    return sink


CASES["mastra171-graph"] = [_graph_result()]


def check(retrievals: list[Retrieval], expected: list[Expected], spans: dict[str, str]) -> None:
    got = sorted(retrievals, key=lambda r: (r.query, r.end_time_unix_nano))
    want = sorted(expected, key=lambda e: e.query)
    assert len(got) == len(want), [(r.convention, spans[r.span_id]) for r in got]
    for r, e in zip(got, want):
        assert (r.convention, r.query) == (e.convention, e.query)
        assert spans[r.span_id] == e.span_name
        assert [c.content for c in r.contexts] == e.contexts  # rank order
        if e.ids:
            assert [c.id for c in r.contexts] == e.ids
        assert r.output == e.answer
        assert r.documents_without_text == e.without_text
        if e.answer is not None:
            assert (r.answer_source, r.answer_clean) == (e.answer_source, True)


def span_names(name: str) -> dict[str, str]:
    return {s.span_id.hex(): s.name for request, _ in requests(name) for rs in request.resource_spans
            for ss in rs.scope_spans for s in ss.spans}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_captured_spans_are_read_once_with_contexts_and_answer(name: str) -> None:
    sink = await ingest_all(name, rate=1.0)
    check(sink.retrievals, CASES[name], span_names(name))


@pytest.mark.parametrize("name", sorted(CASES))
async def test_unsampled_captured_spans_are_counted_like_the_decoded_ones(name: str) -> None:
    sink = await ingest_all(name, rate=0.0)
    assert sum(sink.not_sampled_counts.values()) == len(CASES[name])
    assert sink.retrievals == []


@pytest.mark.parametrize(("name", "mappings", "expected"), [
    ("mastra171-workflow", WORKFLOW_MAPPINGS, Expected("retrieve-step", DOCS, list(IDS), ANSWER,
                                                       span_name="workflow_step retrieve")),
    ("mastra171-tool", TOOL_MAPPINGS, Expected("lookup-tool", DOCS, list(IDS), ANSWER, span_name="execute_tool lookup")),
])
async def test_a_mapping_reads_the_shape_the_app_chose_once(name: str, mappings: str, expected: Expected) -> None:
    config = ConventionConfig(**yaml.safe_load(mappings))
    # The workflow's `generate` step carries the same documents in its input: no second retrieval.
    check((await ingest_all(name, 1.0, config)).retrievals, [expected], span_names(name))
    assert sum((await ingest_all(name, 0.0, config)).not_sampled_counts.values()) == 1


def test_the_single_mapping_no_longer_takes_the_generate_step_as_a_retrieval() -> None:
    mapping = {"query": "mastra.workflow_step.input$.question",
               "contexts": "mastra.workflow_step.output$.documents[*].text"}
    spans = [span_record(s, "svc", 20_000) for request, _ in requests("mastra171-workflow")
             for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    [found] = Conventions(ConventionConfig(mapping=mapping)).extract(spans)
    assert found.span.name == "workflow_step retrieve"
    assert [c.content for c in found.retrieval.contexts] == DOCS


def test_the_genai_documents_of_the_dual_write_are_read_when_genai_comes_first() -> None:
    spans = [span_record(s, "svc", 20_000) for request, _ in requests("langchain-openinference-genai")
             for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    found = Conventions(ConventionConfig(order=("genai",))).extract(spans)
    assert sorted((e.retrieval.query, [c.content for c in e.retrieval.contexts]) for e in found) == sorted(
        (e.query, e.contexts) for e in CORPUS)


@pytest.mark.parametrize("name", ["langchain-openinference-genai-hidden", "otel-genai-off",
                                  "langchain-openllmetry-nocontent"])
async def test_documents_without_text_are_decided_no_content_not_no_contexts(name: str) -> None:
    """Documents whose text was hidden, and retrieval spans recorded with content capture off
    (no query, no documents key): `no_content`, never `no_contexts`."""
    from ctxprec.collector.sampling.decide import RetrievalGate

    sink = await ingest_all(name, rate=1.0)
    decided: list[Decision] = []

    class Decisions:
        def emit(self, outcome: object) -> None:
            decided.append(outcome.decision)  # type: ignore[attr-defined]

        def count(self, *_: object) -> None:
            raise AssertionError("no bulk decision expected")

    gate = RetrievalGate(sampler=Sampler(1.0), queue=None, decisions=Decisions())  # type: ignore[arg-type]
    for retrieval in sink.retrievals:
        gate.submit(retrieval)
    assert decided == [Decision.NO_CONTENT] * 3
