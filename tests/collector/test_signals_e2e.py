"""End to end, every OTLP signal: an app (tests/collector/signals_app.py, its own process) exports
traces, logs and metrics with the SDK's OTLP exporters pointed at `ctxprec serve` by
`OTEL_EXPORTER_OTLP_ENDPOINT` alone, over HTTP and over gRPC; a real OTLP receiver behind
`--forward-to` gets all three, the log records as the app's SDK encoded them. Through an outage
of the downstream the logs wait in the forward queue and none is lost; with no `--forward-to`
they are counted as dropped and one line says what to set."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
from ctxprec.collector.stub_judge import StubJudge

from tests.chaos.tcp_proxy import TcpProxy
from tests.collector.rag_app import running, scrape, serve_config, value, wait_until
from tests.helpers.otlp_capture import OtlpCapture

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MakeStub = Callable[..., Awaitable[StubJudge]]


async def run_app(endpoint: str, tmp_path: Path, *, protocol: str = "http/protobuf", logs: int = 20,
                  traces: int = 2) -> dict[str, Any]:
    """The app, run once in its own process; returns what it says it sent."""
    out = tmp_path / f"sent-{protocol.replace('/', '-')}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CTXPREC_"))}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol, PYTHONPATH=str(ROOT))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.collector.signals_app", "--out", str(out), "--logs", str(logs),
        "--traces", str(traces), cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, output.decode(errors="replace")
    return json.loads(out.read_text())


def judge(stub: StubJudge) -> list[str]:
    # Canary off: the judge's requests read below are the scores' alone.
    return ["--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k", "--sample-rate", "1",
            "--judge-canary-mode", "off"]


async def metrics_of(pipeline: Any) -> dict[Any, float]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.get(f"{pipeline.metrics_url}/metrics") as response:
            return scrape(await response.text())


def data_points(capture: OtlpCapture, name: str) -> dict[str, int]:
    """A counter's values by its `route` attribute, as they arrived."""
    out: dict[str, int] = {}
    for metric in capture.metrics:
        if metric.name == name:
            for point in metric.metric.sum.data_points:
                route = next(kv.value.string_value for kv in point.attributes if kv.key == "route")
                out[route] = point.as_int
    return out


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_an_app_pointed_at_ctxprec_loses_none_of_its_signals(
        make_stub_judge: MakeStub, tmp_path: Path, protocol: str) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    downstream = capture.grpc_url if protocol == "grpc" else capture.http_url
    try:
        async with running(serve_config(*judge(stub), "--forward-to", downstream)) as pipeline:
            port = pipeline.otlp_grpc_port if protocol == "grpc" else pipeline.otlp_http_port
            sent = await run_app(f"http://127.0.0.1:{port}", tmp_path, protocol=protocol)
            await capture.wait_for_logs(len(sent["log_records"]), timeout=20)
            await capture.wait_for_metrics(4, timeout=20)
            scored = await capture.wait_for_span("gen_ai.evaluation.name", "context_precision", timeout=20)
            assert scored.attributes["gen_ai.evaluation.score.value"] == 1.0
            await capture.wait_for_spans(2 * 4, timeout=20)  # per request: its span, then rag.query, retrieve, llm
            m = await metrics_of(pipeline)
        receiver = "otlp_grpc" if protocol == "grpc" else "otlp_http"
        assert value(m, "ctxprec_log_records_received_total", receiver=receiver) == len(sent["log_records"]) == 22
        assert value(m, "ctxprec_metric_data_points_received_total", receiver=receiver) == 4
        assert value(m, "ctxprec_exported_spans_total", exporter="log_forwarder", outcome="ok") == 22
        # Every log record arrived as the app's SDK encoded it, each once; so did the metrics.
        arrived = sorted(log.record.SerializeToString().hex() for log in capture.logs)
        assert arrived == sorted(sent["log_records"])
        assert {log.resource["service.name"] for log in capture.logs} == {"signals-app"}
        assert data_points(capture, "app.requests") == sent["metrics"]["app.requests"]
        # The records logged inside a span still name it.
        requests = {(s.trace_id, s.span_id) for s in capture.spans if s.name == "request"}
        tied = {(log.record.trace_id.hex(), log.record.span_id.hex()) for log in capture.logs if log.record.span_id}
        assert len(requests) == 2 and tied == requests
    finally:
        await capture.stop()


async def test_evaluator_mode_forwards_the_apps_logs_and_metrics_too(make_stub_judge: MakeStub, tmp_path: Path) -> None:
    """`--write-back evaluator` leaves the app's spans alone but not its logs and metrics: they go
    to --forward-to through the evaluator spans' queue, beside the evaluator spans."""
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    try:
        config = serve_config(*judge(stub), "--forward-to", capture.http_url, "--write-back", "evaluator",
                              "--evaluation-logs", "off")
        async with running(config) as pipeline:
            sent = await run_app(f"http://127.0.0.1:{pipeline.otlp_http_port}", tmp_path)
            await capture.wait_for_logs(len(sent["log_records"]), timeout=20)
            await capture.wait_for_metrics(4, timeout=20)
            evaluator = await capture.wait_for_span("openinference.span.kind", "EVALUATOR", timeout=20)
            m = await metrics_of(pipeline)
        assert sorted(log.record.SerializeToString().hex() for log in capture.logs) == sorted(sent["log_records"])
        assert evaluator.attributes["gen_ai.evaluation.name"] == "context_precision"
        assert not [s for s in capture.spans if s.name == "request"]  # the app's own spans stay with the app
        assert value(m, "ctxprec_exported_spans_total", exporter="log_forwarder", outcome="ok") == 22
    finally:
        await capture.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_logs_wait_through_a_downstream_outage_and_none_is_lost(
        make_stub_judge: MakeStub, tmp_path: Path) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    proxy = TcpProxy(capture.http_port)
    proxy.port = _free_port()  # down: nothing listens there yet
    try:
        async with running(serve_config(*judge(stub), "--forward-to", proxy.url)) as pipeline:
            sent = await run_app(f"http://127.0.0.1:{pipeline.otlp_http_port}", tmp_path, logs=200)
            m = await metrics_of(pipeline)
            assert value(m, "ctxprec_log_records_received_total", receiver="otlp_http") == 202
            await asyncio.sleep(1.0)  # the forwarder retries meanwhile
            assert capture.logs == [] and capture.metrics == []
            await proxy.up()
            await capture.wait_for_logs(202, timeout=20)
            await capture.wait_for_metrics(4, timeout=20)
            m = await metrics_of(pipeline)
        assert sorted(log.record.SerializeToString().hex() for log in capture.logs) == sorted(sent["log_records"])
        assert value(m, "ctxprec_exported_spans_total", exporter="log_forwarder", outcome="ok") == 202
        assert value(m, "ctxprec_exported_spans_total", exporter="metric_forwarder", outcome="ok") == 4
        dropped = {labels: v for (name, labels), v in m.items() if name == "ctxprec_export_dropped_total" and v}
        assert dropped == {}
    finally:
        await proxy.down()
        await capture.stop()


async def test_without_forward_to_logs_and_metrics_are_counted_as_dropped_with_one_line(
        make_stub_judge: MakeStub, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stub = await make_stub_judge()
    with caplog.at_level(logging.WARNING):
        async with running(serve_config(*judge(stub))) as pipeline:
            for _ in range(2):
                await run_app(f"http://127.0.0.1:{pipeline.otlp_http_port}", tmp_path, logs=5, traces=1)
            m = await metrics_of(pipeline)
    assert value(m, "ctxprec_log_records_received_total", receiver="otlp_http") == 12
    assert value(m, "ctxprec_export_dropped_total", exporter="log_forwarder", reason="no_forward_to") == 12
    assert value(m, "ctxprec_export_dropped_total", exporter="metric_forwarder", reason="no_forward_to") == 8
    told = [r.getMessage() for r in caplog.records if "--forward-to is not set" in r.getMessage()]
    assert len(told) == 2 and any(line.startswith("OTLP logs") for line in told), told


EVENT_CASES = ROOT / "tests" / "fixtures"


async def post_capture(port: int, case: str, prefix: str) -> None:
    """The case's captured requests of one signal, posted as the app's exporter sent them."""
    import aiohttp

    paths = sorted(p for p in (EVENT_CASES / "otlp" / case).glob("*.pb")
                   if p.name.startswith(prefix) and (prefix or not p.name.startswith(("logs-", "metrics-"))))
    assert paths
    async with aiohttp.ClientSession() as session:
        for path in paths:
            url = f"http://127.0.0.1:{port}/v1/{'logs' if prefix == 'logs-' else 'traces'}"
            async with session.post(url, data=path.read_bytes(),
                                    headers={"Content-Type": "application/x-protobuf"}) as response:
                assert response.status == 200, await response.text()


@pytest.mark.parametrize("case,logs_first", [("otel-genai-events", True), ("otel-genai-events-legacy", False)])
async def test_an_openai_v2_trace_is_scored_against_the_answer_in_its_event_logs(
        make_stub_judge: MakeStub, case: str, logs_first: bool) -> None:
    """openai-v2 with content in log records only (captured from the real app): each retrieval is
    scored against the answer the model gave, read from the chat span's event logs, whichever
    came first (the spans then wait out the quiet period, the default 2 s, within which the logs
    join: the SDK exports logs every second, spans every five)."""
    from ctxprec.collector.stub_judge import parse_data_block

    runs = json.loads((EVENT_CASES / "agent_runs" / f"{case}.json").read_text())["runs"]
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    try:
        config = serve_config(*judge(stub), "--forward-to", capture.http_url, "--quiet-period", "2")
        async with running(config) as pipeline:
            port = pipeline.otlp_http_port
            for prefix in (("logs-", "") if logs_first else ("", "logs-")):
                await post_capture(port, case, prefix)
                await asyncio.sleep(0.5)
            await wait_until(lambda: len(capture.find_spans("gen_ai.evaluation.name")) >= len(runs), 20,
                             "every retrieval scored")
            scored = capture.find_spans("gen_ai.evaluation.name", "context_precision")
            m = await metrics_of(pipeline)
        assert len(scored) == len(runs)
        assert {s.attributes["ctxprec.reference_kind"] for s in scored} == {"output"}
        assert {s.attributes["ctxprec.answer_source"] for s in scored} == {"llm_span"}
        judged = [parse_data_block(r.body["messages"]) for r in stub.recent if r.body and "messages" in r.body]
        verdicts = [d for d in judged if d.get("task", "verdicts") == "verdicts"]
        assert sorted((d["query"], d["reference_kind"], d["reference"]) for d in verdicts) == sorted(
            (run["query"], "output", run["answer"]) for run in runs)
        assert value(m, "ctxprec_reference_kind_total", service=scored[0].resource["service.name"],
                     reference_kind="output") == len(runs)
        assert len(capture.logs) == value(m, "ctxprec_log_records_received_total", receiver="otlp_http") > 0
    finally:
        await capture.stop()
