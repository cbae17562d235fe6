"""A real LLM behind the judge: `ctxprec score` and `ctxprec serve` with default judge settings
against llama-cpp-python's server running SmolLM2-135M-Instruct (tests/llm_judge/server.py).

The model is too small to judge relevance well, so agreement with the labels is not asserted;
what is: every committed sample gets a score, in at most 1.2 judge requests per sample (form
probes, rejected forms and re-asks included), with no request timing out against a server that
answers one request at a time, and a trace sent to the sidecar is scored."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.helpers.rag_traces import emit_sdk_rag_trace
from tests.llm_judge.server import MODEL_ALIAS, LlamaServer, free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CTXPREC = str(ROOT / ".venv" / "bin" / "ctxprec")
SAMPLES = Path(__file__).with_name("samples.jsonl")
JUDGE = ["--judge-model", f"openai/{MODEL_ALIAS}", "--judge-api-key", "unused"]


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    server = LlamaServer().start()
    try:
        yield server
    finally:
        server.stop()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXPREC_", "OTEL_"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def test_score_scores_every_committed_sample_in_at_most_1_2_requests_each(llama: LlamaServer, tmp_path: Path) -> None:
    out = tmp_path / "scores.jsonl"
    done = subprocess.run([CTXPREC, "score", str(SAMPLES), "-o", str(out), *JUDGE, "--judge-api-base", llama.url],
                          env=_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    samples = len(SAMPLES.read_text(encoding="utf-8").splitlines())
    assert samples >= 17 and len(records) == samples
    assert [r["error"] for r in records] == [None] * samples
    assert all(isinstance(r["score"], float) and r["judge"]["calls"] >= 1 for r in records)
    summary = re.search(r"judge openai/smollm2: (\d+) requests \((\d+) failed(?:: ([^)]*))?\)", done.stderr)
    assert summary, done.stderr
    requests, failed = int(summary.group(1)), int(summary.group(2))
    assert requests / samples <= 1.2, done.stderr
    # The only failed requests allowed are the form the server rejects (json_schema: HTTP 500).
    assert "timeout" not in (summary.group(3) or "") and failed <= 2, done.stderr
    assert "using json_object_schema from now on" in done.stderr
    assert "Traceback" not in done.stderr


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    found = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]
    return sum(found)


def test_serve_scores_a_trace_through_the_real_judge(llama: LlamaServer, tmp_path: Path) -> None:
    otlp, metrics = free_port(), free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as sink:
        serve = subprocess.Popen([CTXPREC, "serve", *JUDGE, "--judge-api-base", llama.url, "--sample-rate", "1",
                                  "--judge-canary-mode", "off",  # the one-slot server is the scores' alone
                                  "--otlp-grpc", "off", "--otlp-http", f"127.0.0.1:{otlp}",
                                  "--metrics", f"127.0.0.1:{metrics}", "--quiet-period", "0.5",
                                  "--log-level", "debug"], env=_env(), stdout=sink, stderr=subprocess.STDOUT)
    metrics_url = f"http://127.0.0.1:{metrics}/metrics"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                _metric(metrics_url, "ctxprec_samples_total")
                break
            except OSError:
                time.sleep(0.3)
        provider = TracerProvider(resource=Resource.create({"service.name": "real-judge"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"http://127.0.0.1:{otlp}/v1/traces")))
        trace_id, _ = emit_sdk_rag_trace(provider.get_tracer("real-judge"))
        provider.shutdown()
        evaluated = 'ctxprec_samples_total{decision="evaluated",service="real-judge"}'
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and _metric(metrics_url, evaluated) < 1:
            time.sleep(0.5)
        assert _metric(metrics_url, evaluated) == 1, log.read_text()
        assert _metric(metrics_url, 'ctxprec_samples_total{decision="failed"') == 0, log.read_text()
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    text = log.read_text()
    assert re.search(rf"scored real-judge \S+ \(trace {trace_id}\): [0-9.]+ against the output", text), text
    assert "Traceback" not in text, text
