"""Silence made visible, over captured agent traffic (tests/fixtures/otlp/README.md): a tool that
is not a retriever is counted and logged once per service and tool with the setting that would
take it, sampled or not; LLM spans of sampled traces without a retrieval are counted;
`conventions.tools` moves a tool between taken and not taken; /diagnostics/conventions' body
lists what each convention matched."""
from __future__ import annotations

import json
import logging

import pytest
from ctxprec.collector.assembly.conventions import ConventionConfig
from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest
from ctxprec.collector.components import shutdown
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.sampling.sampler import Sampler
from prometheus_client import generate_latest

from tests.collector.rag_app import scrape, value
from tests.collector.test_captured_spans import RUNS, requests
from tests.helpers.rag_traces import CollectingSink

NOT_TAKEN = "ctxprec_tool_spans_not_taken_total"
LLM_WITHOUT = "ctxprec_llm_spans_without_retrieval_total"
WEATHER = "pydantic-ai-weather"
SEARCH = "pydantic-ai-genai"


def service(name: str) -> str:
    return f"capture-{name}"  # the apps' service.name when captured


async def ingest(name: str, rate: float, config: ConventionConfig | None = None,
                 rounds: int = 1) -> tuple[OtlpIngest, CollectingSink]:
    """The capture sent `rounds` times, as as many runs of the app would (each round's trace ids
    changed: the same ids again would be late spans of decided traces)."""
    sink = CollectingSink()
    ingest = OtlpIngest(keep_trace=Sampler(rate).keep_trace, sink=sink, metrics=Metrics(),
                        settings=IngestSettings(conventions=config or ConventionConfig()))
    for round_ in range(rounds):
        for request, _ in requests(name):
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        span.trace_id = bytes([round_ + 1]) + span.trace_id[1:]
            await ingest.ingest(request, receiver="otlp_http")
        ingest.flush()
    await shutdown(ingest, 0.0)
    return ingest, sink


def samples(ingest: OtlpIngest) -> dict:
    return scrape(generate_latest(ingest._metrics.registry).decode())  # noqa: SLF001


def decided(sink: CollectingSink) -> int:
    """Retrievals that reached a decision: handed on (sampled) or counted `not_sampled`."""
    return len(sink.retrievals) + sum(sink.not_sampled_counts.values())


@pytest.mark.parametrize("rate", [1.0, 0.0], ids=["sampled", "unsampled"])
async def test_the_weather_tool_is_counted_not_taken_and_logged_once(rate: float,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ctxprec.conventions"):
        ingest_, sink = await ingest(WEATHER, rate, rounds=2)
    got = samples(ingest_)
    assert decided(sink) == 0
    assert value(got, NOT_TAKEN, service=service(WEATHER), tool="get_weather") == 2
    lines = [r.getMessage() for r in caplog.records if "get_weather" in r.getMessage()]
    assert lines == [f"service {service(WEATHER)}: tool 'get_weather' was called and not read as a retrieval (its "
                     f"result is not a list of documents); to score it, add 'get_weather' to "
                     f"conventions.tools.include (or read it with a conventions.mappings entry)"]
    [entry] = ingest_.stats.view({"service": service(WEATHER)}).body["services"]
    assert [(t["tool"], t["spans"]) for t in entry["tools_not_taken"]] == [("get_weather", 2)]
    # The model calls of a trace without retrieval: counted where the trace was read (sampled).
    assert value(got, LLM_WITHOUT, service=service(WEATHER)) == (4 if rate else 0)


@pytest.mark.parametrize("rate", [1.0, 0.0], ids=["sampled", "unsampled"])
async def test_what_each_convention_matched_is_listed(rate: float) -> None:
    ingest_, sink = await ingest(SEARCH, rate)
    assert decided(sink) == 3
    [entry] = ingest_.stats.view({}).body["services"]
    assert entry["conventions"] == {"tool": 3}
    assert entry["tools_not_taken"] == [] and entry["llm_spans_without_retrieval"] == 0
    ingest_, _ = await ingest("openai-agents-retriever", rate)
    [entry] = ingest_.stats.view({}).body["services"]
    assert entry["conventions"] == {"openinference": 3}


@pytest.mark.parametrize(("name", "tools", "retrievals", "why"), [
    (WEATHER, {"include": ["get_*"]}, 1, {}),  # the weather tool taken whatever its result
    (SEARCH, {"exclude": ["search_*"]}, 0, {"search_docs": "it matches conventions.tools.exclude"}),
    (SEARCH, {"mode": "off"}, 0, {"search_docs": "conventions.tools.mode is off"}),
])
@pytest.mark.parametrize("rate", [1.0, 0.0], ids=["sampled", "unsampled"])
async def test_the_tools_settings_take_and_leave_tools(name: str, tools: dict, retrievals: int, why: dict,
                                                      rate: float) -> None:
    ingest_, sink = await ingest(name, rate, ConventionConfig(tools=tools))
    assert decided(sink) == retrievals
    if rate and retrievals:
        [weather] = sink.retrievals
        [run] = json.loads((RUNS / f"{WEATHER}.json").read_text())["runs"]
        assert (weather.convention, weather.query) == ("tool", "Utrecht")  # the only text argument
        assert len(weather.contexts) == 1 and "Utrecht" in weather.contexts[0].content
        assert weather.output == run["answer"]
    if why and (rate or tools.get("mode") != "off"):  # off: unsampled tool spans are not looked at
        [entry] = ingest_.stats.view({}).body["services"]
        assert {t["tool"]: t["why"] for t in entry["tools_not_taken"]} == why


async def test_a_frameworks_own_final_answer_tool_is_no_silence() -> None:
    """smolagents answers through its `final_answer` tool: neither a retrieval nor a tool to note."""
    ingest_, sink = await ingest("smolagents-openinference", 1.0)
    assert decided(sink) == 3
    [entry] = ingest_.stats.view({}).body["services"]
    assert entry["conventions"] == {"tool": 3} and entry["tools_not_taken"] == []
    ingest_, sink = await ingest("smolagents-openinference", 1.0, ConventionConfig(tools={"include": ["final_*"]}))
    assert decided(sink) == 6  # named, it is taken (its result, the answer's text, as the document)


def test_tool_names_past_fifty_a_service_are_other_and_names_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    from ctxprec.collector.assembly.silence import NOT_DOCUMENTS, ConventionStats, TraceSeen

    metrics = Metrics()
    stats = ConventionStats(metrics)
    seen = TraceSeen()
    for n in range(60):
        seen.tools["svc", f"tool-{n:02d}" + "x" * (200 if n == 0 else 0), NOT_DOCUMENTS] += 1
    with caplog.at_level(logging.WARNING, logger="ctxprec.conventions"):
        stats.add(seen)
    [entry] = stats.view({}).body["services"]
    names = [t["tool"] for t in entry["tools_not_taken"]]
    assert len(names) == 51 and "other" in names and max(map(len, names)) == 128
    assert next(t["spans"] for t in entry["tools_not_taken"] if t["tool"] == "other") == 10
    assert len(caplog.records) == 50  # one line per tool kept, none for those folded into other
    got = scrape(generate_latest(metrics.registry).decode())
    assert value(got, NOT_TAKEN, service="svc", tool="other") == 10
