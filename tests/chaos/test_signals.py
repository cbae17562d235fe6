"""Scenario: a signal while `ctxprec serve` (a child process, OTLP/HTTP in, span write-back to a
real OTLP receiver) holds acknowledged spans: retrieval spans wait for their scores from a slow
judge (1.5 s an answer). SIGHUP (a closed terminal, `kill -HUP`) finishes like SIGTERM and SIGINT:
the process logs that it is shutting down and exits 0 within the deadline, and every span the
app's exporter had acknowledged reaches the downstream receiver. (SIGHUP used to kill the process
at once: 17 acknowledged spans of such a run were never forwarded.)"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ctxprec.collector.stub_judge import StubJudge
from tests.collector.rag_app import RagApp
from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.processes import free_port, wait_listening

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TRACES = 12
SHUTDOWN_TIMEOUT_S = 2.0
EXIT_ALLOWANCE_S = 4.0  # the forwarder's grace and the last sends after the deadline
DOCS = ["Open Settings > Security to reset it.", "Our office is closed on Sundays."]


def serve_process(http_port: int, metrics_port: int, judge_url: str, forward_to: str, log_path: Path
                  ) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXPREC_", "OTEL_"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "ctxprec.collector.cli", "serve", "--otlp-grpc", "off",
             "--otlp-http", f"127.0.0.1:{http_port}", "--metrics", f"127.0.0.1:{metrics_port}",
             "--forward-to", forward_to, "--judge-model", "openai/stub", "--judge-api-base", judge_url,
             "--judge-api-key", "k", "--sample-rate", "1", "--quiet-period", "0.1",
             "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
async def test_nothing_acknowledged_is_lost_on_a_stop_signal(
        sig: signal.Signals, make_stub_judge: Callable[..., Awaitable[StubJudge]], tmp_path: Path) -> None:
    stub = await make_stub_judge(latency_ms=1500)
    capture = await OtlpCapture().start()
    http_port, metrics_port = free_port(), free_port()
    log_path = tmp_path / "serve.log"
    proc = serve_process(http_port, metrics_port, stub.url, capture.http_url, log_path)
    app = None
    try:
        await asyncio.to_thread(wait_listening, proc, http_port, name="ctxprec serve", log_path=log_path,
                                timeout_s=30)
        app = RagApp(protocol="http", port=http_port)
        sent = InMemorySpanExporter()
        app.provider.add_span_processor(SimpleSpanProcessor(sent))
        for i in range(TRACES):
            app.openinference(f"How do I reset my password? #{i}", DOCS, "Open Settings.")
        await app.flush()  # every batch acknowledged by the sidecar (HTTP 200)
        await asyncio.sleep(0.3)  # assembled and queued: the retrieval spans wait for their scores
        assert proc.poll() is None, log_path.read_text()
        held = {f"{s.context.span_id:016x}" for s in sent.get_finished_spans()} - {s.span_id for s in capture.spans}
        assert held, "every span was already forwarded: the signal would test nothing"
        signalled = time.monotonic()
        proc.send_signal(sig)
        status = await asyncio.to_thread(proc.wait, SHUTDOWN_TIMEOUT_S + EXIT_ALLOWANCE_S + 5)
        took = time.monotonic() - signalled
        log = log_path.read_text(errors="replace")
        assert status == 0, log
        assert took < SHUTDOWN_TIMEOUT_S + EXIT_ALLOWANCE_S, (took, log)
        assert f"{sig.name} received" in log and "shutting down" in log, log
        forwarded = {s.span_id for s in capture.spans}
        acknowledged = {f"{s.context.span_id:016x}" for s in sent.get_finished_spans()}
        assert len(acknowledged) == 3 * TRACES
        assert acknowledged <= forwarded, f"{len(acknowledged - forwarded)} acknowledged spans never forwarded"
    finally:
        if app is not None:
            await app.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        await capture.stop()
