"""Silence made visible, over captured agent traffic (tests/fixtures/otlp/README.md): the tool
that is not a retriever is counted and logged once per service and tool with the setting that
would take it, sampled or not; LLM spans of sampled traces without a retrieval are counted;
`conventions.tools` moves a tool between taken and not taken; /diagnostics/conventions' body
lists what each convention matched."""
from __future__ import annotations

import logging

import pytest
from ctxprec.collector.assembly.conventions import ConventionConfig
from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest
from ctxprec.collector.components import shutdown
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.sampling.sampler import Sampler
from prometheus_client import generate_latest

from tests.collector.rag_app import scrape, value
from tests.collector.test_captured_spans import requests
from tests.helpers.rag_traces import CollectingSink

NOT_TAKEN = "ctxprec_tool_spans_not_taken_total"
LLM_WITHOUT = "ctxprec_llm_spans_without_retrieval_total"


async def ingest_one(name: str, rate: float, config: ConventionConfig | None = None) -> tuple[OtlpIngest, CollectingSink]:
    sink = CollectingSink()
    ingest = OtlpIngest(keep_trace=Sampler(rate).keep_trace, sink=sink, metrics=Metrics(),
                        settings=IngestSettings(conventions=config or ConventionConfig()))
    for request, raw in requests(name):
        await ingest.ingest(request, receiver="otlp_http", raw=raw)
    await shutdown(ingest, 0.0)
    return ingest, sink


def samples(ingest: OtlpIngest) -> dict:
    return scrape(generate_latest(ingest._metrics.registry).decode())  # noqa: SLF001


@pytest.mark.parametrize(("name", "service", "convention"), [
    ("pydanticai-genai-tool", "pydanticai-genai", "tool"),
    ("openai-agents-chat-tool", "openai-agents-chat", "tool"),
    ("openai-agents-responses-tool", "openai-agents-responses", "tool"),
])
@pytest.mark.parametrize("rate", [1.0, 0.0], ids=["sampled", "unsampled"])
async def test_the_weather_tool_is_counted_not_taken_and_logged_once(
        name: str, service: str, convention: str, rate: float, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ctxprec.conventions"):
        ingest, sink = await ingest_twice(name, rate)
    got = samples(ingest)
    assert value(got, NOT_TAKEN, service=service, tool="get_weather") == 2  # both requests' weather calls
    assert value(got, NOT_TAKEN, service=service, tool="search_docs") == 0
    lines = [r.getMessage() for r in caplog.records if "get_weather" in r.getMessage()]
    assert lines == [f"service {service}: tool 'get_weather' was called and not read as a retrieval (its result "
                     f"is not a list of documents); to score it, add 'get_weather' to conventions.tools.include "
                     f"(or read it with a conventions.mappings entry)"]
    body = ingest.stats.view({"service": service}).body
    [entry] = body["services"]
    assert entry["conventions"] == {convention: 2}
    assert [(t["tool"], t["spans"]) for t in entry["tools_not_taken"]] == [("get_weather", 2)]
    # The weather run's model calls: counted where the trace was read (sampled) only.
    assert value(got, LLM_WITHOUT, service=service) == (4 if rate else 0)
    assert len(sink.retrievals) + sum(sink.not_sampled_counts.values()) == 2


async def ingest_twice(name: str, rate: float) -> tuple[OtlpIngest, CollectingSink]:
    """The capture sent twice, as two runs of the app would (the same ids: a second, later
    batch of spans of traces already decided is late, so the ids are changed)."""
    sink = CollectingSink()
    ingest = OtlpIngest(keep_trace=Sampler(rate).keep_trace, sink=sink, metrics=Metrics(),
                        settings=IngestSettings(conventions=ConventionConfig()))
    for round_ in (1, 2):
        for request, _ in requests(name):
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        span.trace_id = bytes([round_]) + span.trace_id[1:]
            await ingest.ingest(request, receiver="otlp_http")
        ingest.flush()
    await shutdown(ingest, 0.0)
    return ingest, sink


@pytest.mark.parametrize(("tools", "retrievals", "why"), [
    ({"include": ["get_*"]}, 2, None),  # the weather tool taken whatever its result
    ({"exclude": ["search_docs"]}, 0, {"search_docs": "it matches conventions.tools.exclude",
                                       "get_weather": "its result is not a list of documents"}),
    ({"mode": "off"}, 0, {"search_docs": "conventions.tools.mode is off",
                          "get_weather": "conventions.tools.mode is off"}),
])
@pytest.mark.parametrize("rate", [1.0, 0.0], ids=["sampled", "unsampled"])
async def test_the_tools_settings_take_and_leave_tools(tools: dict, retrievals: int, why: dict | None,
                                                      rate: float) -> None:
    config = ConventionConfig(tools=tools)
    ingest, sink = await ingest_one("pydanticai-genai-tool", rate, config)
    assert len(sink.retrievals) + sum(sink.not_sampled_counts.values()) == retrievals
    if rate and tools.get("include"):
        weather = next(r for r in sink.retrievals if r.query == "Paris")
        assert [c.content for c in weather.contexts] == ['{"city":"Paris","temperature":21,"conditions":"sunny"}']
    if why is not None and (rate or tools.get("mode") != "off"):  # off: unsampled tool spans are not looked at
        [entry] = ingest.stats.view({}).body["services"]
        assert {t["tool"]: t["why"] for t in entry["tools_not_taken"]} == why


async def test_llm_spans_are_not_counted_in_traces_with_a_retrieval() -> None:
    ingest, sink = await ingest_one("openai-agents-responses-retriever", 1.0)
    got = samples(ingest)
    assert len(sink.retrievals) == 1
    # The weather trace's two model calls only; the retrieval trace's are not counted.
    assert value(got, LLM_WITHOUT, service="openai-agents-responses") == 2
    [entry] = ingest.stats.view({}).body["services"]
    assert entry["conventions"] == {"openinference": 1}
