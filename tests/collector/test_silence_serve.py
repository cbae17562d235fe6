"""/diagnostics/conventions through `ctxprec serve`: captured agent traffic (Pydantic AI with a
retrieval tool, and with a weather tool) posted to the OTLP/HTTP receiver; the endpoint answers only
with the metrics token, like the other diagnostics, and lists what each convention matched and
the tool not taken; the counters are on /metrics."""
from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.collector.rag_app import running, scrape, serve_config, value, wait_until
from tests.collector.test_captured_spans import FIXTURES

pytestmark = pytest.mark.slow


async def test_diagnostics_conventions_needs_the_token_and_lists_the_tool_not_taken(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    async with running(serve_config("--metrics-token-file", str(token), "--sample-rate", "1")) as pipeline:
        auth = {"Authorization": "Bearer s3cret"}
        async with aiohttp.ClientSession() as session:
            for path in [FIXTURES / "pydantic-ai-genai" / "000.pb", FIXTURES / "pydantic-ai-weather" / "000.pb"]:
                async with session.post(f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces", data=path.read_bytes(),
                                        headers={"Content-Type": "application/x-protobuf"}) as response:
                    assert response.status == 200
            await wait_until(lambda: pipeline.fanout.counts.get("evaluated", 0) == 3, what="the tool retrievals scored")
            await wait_until(lambda: not pipeline.ingest.buffer, what="every trace read")
            url = f"{pipeline.metrics_url}/diagnostics/conventions"
            async with session.get(url) as response:
                assert response.status == 401
            async with session.get(url, headers=auth) as response:
                assert response.status == 200
                body = await response.json()
            async with session.get(f"{pipeline.metrics_url}/metrics", headers=auth) as response:
                metrics = scrape(await response.text())
    search, weather = body["services"]
    assert (search["service"], search["conventions"], search["tools_not_taken"]) == (
        "capture-pydantic-ai-genai", {"tool": 3}, [])
    assert weather["service"] == "capture-pydantic-ai-weather"
    assert weather["tools_not_taken"] == [{"tool": "get_weather", "spans": 1,
                                           "why": "its result is not a list of documents",
                                           "to_take_it": "add 'get_weather' to conventions.tools.include (or read "
                                                         "it with a conventions.mappings entry)"}]
    assert value(metrics, "ctxprec_tool_spans_not_taken_total", service=weather["service"], tool="get_weather") == 1
    assert value(metrics, "ctxprec_llm_spans_without_retrieval_total", service=weather["service"]) == 2
    assert value(metrics, "ctxprec_llm_spans_without_retrieval_total", service=search["service"]) == 0
    assert value(metrics, "ctxprec_samples_total", service=search["service"], decision="evaluated") == 3


async def test_unsampled_agent_traffic_gets_one_decision_per_retrieval_tool() -> None:
    """The same traffic at sample rate 0: each retrieval tool call is counted `not_sampled`
    (from the request bytes, the tool spans looked at), the weather tool still noted."""
    async with running(serve_config("--sample-rate", "0")) as pipeline:
        async with aiohttp.ClientSession() as session:
            for path in [FIXTURES / "pydantic-ai-genai" / "000.pb", FIXTURES / "pydantic-ai-weather" / "000.pb"]:
                async with session.post(f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces", data=path.read_bytes(),
                                        headers={"Content-Type": "application/x-protobuf"}) as response:
                    assert response.status == 200
            async with session.get(f"{pipeline.metrics_url}/metrics") as response:
                metrics = scrape(await response.text())
    decisions = {labels: n for (name, labels), n in metrics.items() if name == "ctxprec_samples_total" and n}
    assert decisions == {(("decision", "not_sampled"), ("service", "capture-pydantic-ai-genai")): 3}
    assert value(metrics, "ctxprec_tool_spans_not_taken_total", service="capture-pydantic-ai-weather",
                 tool="get_weather") == 1
