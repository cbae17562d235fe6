"""End to end with a real Prometheus: the sidecar (OTLP from the synthetic app, a Kafka consumer
on a Tansu broker, the stub judge over HTTP as an OpenAI model) is scraped every second with the
project's rules (windows shortened); after the injected retriever degradation the drift alert
fires, and every dashboard panel's queries return data through Prometheus's HTTP API. The panels
that show silence (LLM traffic without a scored retrieval, tool calls not read as retrievals) get
theirs from a real Pydantic AI agent's captured trace whose only tool is a weather lookup; the judge
agreement panels from people's labels POSTed on the Kafka events' retrievals."""
from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ctxprec.collector import config as config_module
from ctxprec.collector.demo.synthetic_app import AppConfig, SyntheticRagApp
from ctxprec.collector.serve import serve
from ctxprec.collector.stub_judge import StubJudge
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from tests.deploy.live_prometheus import Prometheus
from tests.helpers.processes import free_port
from tests.kafka.tansu import Broker, create_topic, produce

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
# A real Pydantic AI agent (tests/realtraffic/agents) calling a tool that is not a retrieval.
AGENT_WITHOUT_RETRIEVAL = ROOT / "tests" / "fixtures" / "otlp" / "pydantic-ai-weather"
DEGRADE_AFTER_S = 20.0
RATE = 30.0  # traces/s across both services
ALERT_TIMEOUT_S = 60.0


def _substitute(expr: str, range_s: int) -> str:
    # What Grafana does before it sends a query: variables (All -> the variable's allValue `.*`),
    # $__rate_interval (4 x the 1 s scrape interval, rounded up) and $__range.
    return (expr.replace("$__rate_interval", "10s").replace("$__range", f"{range_s}s")
            .replace("$service", ".*").replace("$retriever", ".*"))


def _as_new_trace(body: bytes) -> bytes:
    """A captured OTLP trace request under a fresh trace id (another run of the same app)."""
    request = ExportTraceServiceRequest.FromString(body)
    trace_id = uuid.uuid4().bytes
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                span.trace_id = trace_id
    return request.SerializeToString()


def _has_data(result: list[dict[str, Any]]) -> bool:
    for series in result:
        values = series.get("values") or ([series["value"]] if "value" in series else [])
        if any(not math.isnan(float(v[1])) for v in values):
            return True
    return False


async def _wait_for_alert(prom: Prometheus, session: aiohttp.ClientSession, name: str, service: str) -> float:
    deadline = time.monotonic() + ALERT_TIMEOUT_S
    while time.monotonic() < deadline:
        alerts = (await prom.api(session, "alerts"))["alerts"]
        for alert in alerts:
            if (alert["labels"]["alertname"] == name and alert["labels"].get("service") == service
                    and alert["state"] == "firing"):
                return time.monotonic()
        await asyncio.sleep(0.5)
    raise AssertionError(f"{name} for {service} did not fire within {ALERT_TIMEOUT_S}s: {alerts}")


@pytest.mark.slow
async def test_alert_fires_and_every_dashboard_panel_has_data(tmp_path: Path, stub_judge: StubJudge) -> None:
    broker = Broker(free_port(), tmp_path / "tansu.log")
    broker.start()
    topic = f"rag-{uuid.uuid4().hex[:8]}"
    serve_task: asyncio.Task[None] | None = None
    stop_serve, stop_app = asyncio.Event(), asyncio.Event()
    prom: Prometheus | None = None
    app: SyntheticRagApp | None = None
    app_task: asyncio.Task[Any] | None = None
    try:
        await create_topic(broker.bootstrap, topic, partitions=2)
        config = config_module.load(None, environ={}, file_values={
            "receivers.otlp_grpc": "off", "receivers.otlp_http": "127.0.0.1:0", "metrics.listen": "127.0.0.1:0",
            "judge.model": "openai/gpt-4o-mini", "judge.api_base": stub_judge.url, "judge.api_key": "test-key",
            "sampling.default_rate": 1.0, "assembly.quiet_period_s": 0.2, "assembly.max_wait_s": 5.0,
            "scoring.max_rss_mb": "off", "drift.warmup": 50,
            "kafka.bootstrap": broker.bootstrap, "kafka.topic": topic, "kafka.format": "rag_event",
            "kafka.group": "live-prometheus", "kafka.auto_offset_reset": "earliest"})
        holder: dict[str, Any] = {}
        ready = asyncio.Event()
        serve_task = asyncio.create_task(serve(config, ready=ready, stop=stop_serve,
                                               on_start=lambda p: holder.setdefault("pipeline", p)))
        await asyncio.wait_for(ready.wait(), 30)
        pipeline = holder["pipeline"]
        metrics_target = pipeline.metrics_url.removeprefix("http://")

        prom = Prometheus(tmp_path / "prometheus", scrape_target=metrics_target)
        await prom.start()
        started = time.monotonic()

        app = SyntheticRagApp(AppConfig(endpoint=f"http://127.0.0.1:{pipeline.otlp_http_port}", rate=RATE,
                                        duration=None, degrade_after=DEGRADE_AFTER_S, seed=21, export_delay_ms=100))
        app_task = asyncio.create_task(app.run(stop_app))

        async with aiohttp.ClientSession() as session:
            # A few RAG events through Kafka, and one request the OTLP receiver must refuse.
            events = [{"trace_id": uuid.uuid4().hex, "span_id": uuid.uuid4().hex[:16], "service": "kafka-events",
                       "query": "How do I reset my password?", "output": "Open Settings and click Reset Password.",
                       "contexts": ["Click Reset Password under Settings.", "Invoices are PDF files."]}
                      for _ in range(6)]
            await produce(broker.bootstrap, topic, [(None, json.dumps(e).encode()) for e in events])
            # People's labels on those retrievals (matched when their verdicts come): the judge
            # agreement panels get data.
            labels = "\n".join(json.dumps({"trace_id": e["trace_id"], "span_id": e["span_id"],
                                            "relevant": [True, False], "annotator": "live-test"}) for e in events)
            async with session.post(f"{pipeline.metrics_url}/labels", data=labels.encode(),
                                    headers={"Content-Type": "application/x-ndjson"}) as r:
                assert r.status == 200, await r.text()
                assert (await r.json())["refused"] == []
            async with session.post(f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces", data=b"\x01not-protobuf",
                                    headers={"Content-Type": "application/x-protobuf"}) as r:
                assert r.status == 400
            for body in sorted(AGENT_WITHOUT_RETRIEVAL.glob("[0-9]*.pb")):
                async with session.post(f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces",
                                        data=body.read_bytes(),
                                        headers={"Content-Type": "application/x-protobuf"}) as r:
                    assert r.status == 200, await r.text()

            fired_at = await _wait_for_alert(prom, session, "CtxprecPrecisionDrift", "support-bot")
            # The agent runs again (the same capture under a new trace id), many scrapes after its
            # first run: the silence counters rise while Prometheus watches, so that increase()
            # over the panels' range sees them (a counter that first appears at its final value
            # shows no increase).
            for body in sorted(AGENT_WITHOUT_RETRIEVAL.glob("[0-9]*.pb")):
                async with session.post(f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces",
                                        data=_as_new_trace(body.read_bytes()),
                                        headers={"Content-Type": "application/x-protobuf"}) as r:
                    assert r.status == 200, await r.text()
            assert fired_at - started > DEGRADE_AFTER_S, "the drift alert fired before the degradation"
            assert app.stats.degraded_at is not None

            # Let the shortened 30 s "1h" window fill with degraded scores, then the drop alerts fire too.
            await asyncio.sleep(max(0.0, started + DEGRADE_AFTER_S + 35 - time.monotonic()))
            alerts = {(a["labels"]["alertname"], a["labels"].get("service"), a["state"])
                      for a in (await prom.api(session, "alerts"))["alerts"]}
            assert ("CtxprecPrecisionDrift", "docs-search", "firing") not in alerts
            assert ("CtxprecPrecisionDrop", "support-bot", "firing") in alerts, alerts
            assert not any(name == "CtxprecNoScores" for name, _, _ in alerts), alerts

            # The dashboards' variables resolve to the services that sent traffic.
            services = await prom.api(session, "label/service/values", **{"match[]": "ctxprec_samples_total"})
            assert {"support-bot", "docs-search"} <= set(services)

            now = time.time()
            range_s = int(time.monotonic() - started)
            empty: list[str] = []
            checked = 0
            for path in DASHBOARDS:
                for panel in json.loads(path.read_text())["panels"]:
                    panel_has_data = False
                    for target in panel["targets"]:
                        expr = _substitute(target["expr"], range_s)
                        if target.get("instant"):
                            data = await prom.api(session, "query", query=expr, time=now)
                        else:
                            data = await prom.api(session, "query_range", query=expr, start=now - range_s,
                                                  end=now, step=2)
                        checked += 1
                        panel_has_data = panel_has_data or _has_data(data["result"])
                    if not panel_has_data:
                        empty.append(f"{path.stem}: {panel['title']}")
            assert checked >= 30
            # The check can fail: a metric nobody exposes returns no data.
            missing = await prom.api(session, "query_range", query="rate(ctxprec_no_such_metric_total[10s])",
                                     start=now - range_s, end=now, step=2)
            assert not _has_data(missing["result"])
            assert not empty, f"panels without data: {empty}"

            # The drop shows in the recorded series the overview plots.
            data = await prom.api(session, "query", query='service_retriever:ctxprec_context_precision:mean5m{service="support-bot"}')
            assert float(data["result"][0]["value"][1]) < 0.6
            data = await prom.api(session, "query", query='service_retriever:ctxprec_context_precision:mean5m{service="docs-search"}')
            assert float(data["result"][0]["value"][1]) > 0.8

            # The lowest-scoring traces are reachable from the histogram: Prometheus stored the
            # trace ids the sidecar attached as exemplars to the low buckets.
            data = await prom.api(session, "query_exemplars", query='ctxprec_context_precision_bucket{service="support-bot",le=~"0.1|0.2|0.3|0.4|0.5|0.6"}',
                                  start=now - range_s, end=now)
            trace_ids = {e["labels"].get("trace_id") for series in data for e in series["exemplars"]}
            assert trace_ids and all(t and len(t) == 32 for t in trace_ids), data
    except BaseException:
        if prom is not None:
            print(prom.log_tail())
        raise
    finally:
        stop_app.set()
        if app_task is not None:
            await asyncio.gather(app_task, return_exceptions=True)
        if app is not None:
            app.shutdown()
        stop_serve.set()
        if serve_task is not None:
            await asyncio.gather(serve_task, return_exceptions=True)
        if prom is not None:
            prom.stop()
        broker.stop()
