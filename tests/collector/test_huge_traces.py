"""Traces as agents send them, into a real `ctxprec serve` with the stub judge over HTTP: one agent
trace of 20,001 spans and 500 retrievals (Pydantic AI's captured spans replicated, OTLP protobuf
in the SDK's 512-span requests) while `/healthz` is probed every 100 ms, and traces whose LLM
host's clock is 50 ms behind the retriever's (tests/helpers/huge_trace.py)."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from ctxprec.collector.pipeline import Pipeline

from tests.collector.rag_app import running, serve_config, wait_until
from tests.helpers.huge_trace import huge_trace, requests_of, skewed_traces
from tests.helpers.processes import free_port, stop_process, wait_listening

pytestmark = pytest.mark.slow

SERVICE = "capture-pydantic-ai-genai"  # the captured resource's service.name
PROTOBUF = {"Content-Type": "application/x-protobuf"}


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {tuple(sorted(s.labels.items())): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name}


async def test_a_20001_span_trace_keeps_healthz_answering_and_decides_each_retrieval_once(
        stub_judge, tmp_path: Path) -> None:
    units = 500
    _, spans = huge_trace(units)
    bodies = requests_of(spans)
    assert len(spans) == 20_001
    http_port, metrics_port = free_port(), free_port()
    log = tmp_path / "serve.log"
    serve = subprocess.Popen(
        [sys.executable, "-m", "ctxprec.collector.cli", "serve", "--otlp-grpc", "off",
         "--otlp-http", f"127.0.0.1:{http_port}", "--metrics", f"127.0.0.1:{metrics_port}",
         "--sample-rate", "1", "--judge-model", "openai/stub", "--judge-api-base", stub_judge.url,
         "--judge-api-key", "test", "--quiet-period", "0.2", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    try:
        # In a thread: the stub judge answers serve's start-up check from this loop meanwhile.
        for port in (metrics_port, http_port):
            await asyncio.to_thread(wait_listening, serve, port, name="ctxprec serve", log_path=log, timeout_s=60)
        base = f"http://127.0.0.1:{metrics_port}"
        probes: list[float] = []
        failures: list[str] = []
        done = asyncio.Event()

        async def probe(session: aiohttp.ClientSession) -> None:
            # Every 100 ms, as a liveness probe with a 1 s timeout would (the kubelet's default).
            while not done.is_set():
                sent = time.perf_counter()
                try:
                    async with session.get(f"{base}/healthz", timeout=aiohttp.ClientTimeout(total=1.0)) as answer:
                        await answer.read()
                        if answer.status != 200:
                            failures.append(f"/healthz answered {answer.status}")
                except asyncio.TimeoutError:
                    failures.append(f"/healthz unanswered after 1 s (probe {len(probes) + 1})")
                probes.append(time.perf_counter() - sent)
                await asyncio.sleep(0.1)

        def decided(text: str) -> float:
            return sum(_samples(text, "ctxprec_samples_total").values())

        async with aiohttp.ClientSession() as session:
            prober = asyncio.create_task(probe(session))
            for body in bodies:
                async with session.post(f"http://127.0.0.1:{http_port}/v1/traces", data=body,
                                        headers=PROTOBUF) as answer:
                    assert answer.status == 200, await answer.text()
            deadline = time.monotonic() + 120
            while True:
                async with session.get(f"{base}/metrics") as answer:
                    text = await answer.text()
                if decided(text) >= units or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            done.set()
            await prober
            # Nothing decided twice: the count stays where it is after the trace's wait is over.
            await asyncio.sleep(1.0)
            async with session.get(f"{base}/metrics") as answer:
                text = await answer.text()
        assert failures == [], failures
        assert len(probes) >= 10
        assert decided(text) == units
        assert _samples(text, "ctxprec_samples_total") == {
            (("decision", "evaluated"), ("service", SERVICE)): units}
        # Every retrieval judged against the answer of its own run, not the question alone.
        kinds = _samples(text, "ctxprec_reference_kind_total")
        assert kinds.get((("reference_kind", "output"), ("service", SERVICE))) == units
    finally:
        stop_process(serve)


def _value(p: Pipeline, name: str, **labels: str) -> float:
    return p.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_an_llm_host_clock_50ms_behind_still_gives_the_answer(stub_judge, capture) -> None:
    traces = skewed_traces(20)
    flags = ["--judge-model", "openai/stub", "--judge-api-base", stub_judge.url, "--judge-api-key", "k",
             "--forward-to", capture.http_url, "--write-back", "span", "--sample-rate", "1"]
    async with running(serve_config(*flags)) as p:
        async with aiohttp.ClientSession() as session:
            for _, spans in traces:
                [body] = requests_of(spans)
                async with session.post(f"http://127.0.0.1:{p.otlp_http_port}/v1/traces", data=body,
                                        headers=PROTOBUF) as answer:
                    assert answer.status == 200, await answer.text()
        await wait_until(lambda: _value(p, "ctxprec_samples_total", service=SERVICE, decision="evaluated") == 20,
                         what="every retrieval scored")
        sent = sum(len(spans) for _, spans in traces)
        await wait_until(lambda: len(capture.spans) >= sent, what="every span forwarded")
        assert _value(p, "ctxprec_reference_kind_total", service=SERVICE, reference_kind="output") == 20
        assert _value(p, "ctxprec_reference_kind_total", service=SERVICE, reference_kind="query") == 0
    scored = capture.find_spans("gen_ai.evaluation.name", "context_precision")
    assert len(scored) == 20
    assert {s.attributes["ctxprec.answer_source"] for s in scored} == {"llm_span"}
    assert {s.span.name for s in scored} == {"execute_tool search_docs"}
