"""Result sink overhead: CPU of the whole `ctxprec serve` process per score, with and without
`--sink phoenix=URL`, in the same run.

A real Arize Phoenix server (tests/helpers/phoenix.py, from .venv-phoenix, which `make test`
builds) and the stub judge run in their own processes. `ctxprec serve` runs as the CLI, in span
mode, forwarding every span to Phoenix in both cases, so that the only difference is the sink:
one span annotation and one document annotation per context for each score (5 contexts here).
OTLP/HTTP protobuf RAG traces (OpenInference) come at a fixed rate, sample rate 1; the sidecar's
CPU time (psutil, its own process) is read before and after, once every score is decided and,
with the sink on, delivered to Phoenix (`ctxprec_exported_spans_total{exporter="phoenix"}`), so
the sending is inside the figure. Runs alternate off/on in back-to-back pairs; the headline is
the median of the per-pair ratios.

Goal: the sink adds under 10% CPU per score.

    .venv/bin/python -m bench.sink_overhead            # full
    .venv/bin/python -m bench.sink_overhead --quick    # shorter
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    machine,
    process_cpu_s,
    wait_http,
    write_result,
)
from tests.helpers.processes import free_port
from tests.helpers.rag_traces import rag_request

ROOT = Path(__file__).resolve().parent.parent
SERVICE = "bench-sink"
CONTEXTS = 5
# After the traffic, both runs wait this long (and until everything is decided and sent), so that
# their CPU covers the same wall time, idle timers and scrapes included.
TAIL_S = 15.0
WORDS = ("password reset account billing invoice refund shipping order login security email settings profile "
         "support ticket subscription plan upgrade cancel device mobile app").split()


def build_request(rng: random.Random, traces: int, project: str) -> bytes:
    """`traces` OpenInference RAG traces (root, retriever with 5 documents, LLM) in one request."""
    def documents() -> list[tuple[str | None, str]]:
        return [(f"kb-{rng.randrange(5000)}",
                 ("[relevant]" if rng.random() < (0.7 if rank < 3 else 0.15) else "[irrelevant]") + " "
                 + " ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 150)))) for rank in range(CONTEXTS)]

    return rag_request(rng, traces, resource={"service.name": SERVICE, "openinference.project.name": project},
                       documents=documents, root_kind="CHAIN")


async def _scrape(session: Any, url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    async with session.get(url) as response:
        text = await response.text()
    out = {"decided": 0.0, "evaluated": 0.0, "sink_ok": 0.0, "sink_dropped": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "ctxprec_samples_total" and labels.get("service") == SERVICE:
                out["decided"] += sample.value
                if labels["decision"] == "evaluated":
                    out["evaluated"] += sample.value
            elif sample.name == "ctxprec_exported_spans_total" and labels.get("exporter") == "phoenix":
                if labels["outcome"] == "ok":
                    out["sink_ok"] += sample.value
            elif sample.name == "ctxprec_export_dropped_total" and labels.get("exporter") == "phoenix":
                out["sink_dropped"] += sample.value
    return out


@dataclass
class Run:
    sink: bool
    evaluated: int
    offered: int
    cpu_s: float
    sink_ok: int
    sink_dropped: int
    seconds_to_settle: float

    @property
    def cpu_ms_per_score(self) -> float:
        return self.cpu_s / self.evaluated * 1000 if self.evaluated else float("nan")


async def _run(sink: bool, phoenix_url: str, judge_url: str, rate: float, seconds: float, seed: int) -> Run:
    import aiohttp
    import psutil

    http_port, metrics_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "ctxprec.collector.cli", "serve", "--otlp-grpc", "off",
           "--otlp-http", f"127.0.0.1:{http_port}", "--metrics", f"127.0.0.1:{metrics_port}",
           "--judge-model", "openai/stub", "--judge-api-base", judge_url, "--judge-api-key", "bench",
           "--sample-rate", "1", "--workers", "16", "--judge-concurrency", "16", "--quiet-period", "0.2",
           "--max-wait", "5", "--log-level", "warning", "--forward-to", phoenix_url, "--write-back", "span"]
    if sink:
        cmd += ["--sink", f"phoenix={phoenix_url}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXPREC_", "OTEL_", "PHOENIX_"))}
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    try:
        await wait_http(f"http://127.0.0.1:{metrics_port}/readyz")
        proc = psutil.Process(child.pid)
        rng = random.Random(seed)
        ingest = f"http://127.0.0.1:{http_port}/v1/traces"
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        async with aiohttp.ClientSession() as session:

            async def offer(duration: float) -> int:
                sent, tick, carry = 0, 0.1, 0.0
                began = time.monotonic()
                while time.monotonic() - began < duration:
                    carry += rate * tick
                    n = int(carry)
                    carry -= n
                    if n:
                        async with session.post(ingest, data=build_request(rng, n, project(sink)),
                                                headers={"Content-Type": "application/x-protobuf"}) as r:
                            await r.read()
                        sent += n
                    await asyncio.sleep(max(0.0, tick - (time.monotonic() - began) % tick))
                return sent

            async def settle(expected: int, window: float) -> tuple[dict[str, float], float]:
                """Waits `window` seconds, scraping once a second (the same in both runs: a scrape
                costs the sidecar CPU too), then until every offered trace is decided and, with the
                sink, every score sent or dropped. Returns the figures and when that was reached."""
                began = time.monotonic()
                settled_at: float | None = None
                while True:
                    now = await _scrape(session, metrics_url)
                    done = now["decided"] >= expected and (
                        not sink or now["sink_ok"] + now["sink_dropped"] >= now["evaluated"])
                    if done and settled_at is None:
                        settled_at = time.monotonic() - began
                    waited = time.monotonic() - began
                    if (done and waited >= window) or waited > window + 120:
                        return now, settled_at if settled_at is not None else float("nan")
                    await asyncio.sleep(1.0)

            warm = await offer(2.0)
            before, _ = await settle(warm, 3.0)
            cpu0 = process_cpu_s(proc)
            offered = await offer(seconds)
            after, settle_s = await settle(warm + offered, TAIL_S)
            cpu1 = process_cpu_s(proc)
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return Run(sink, int(after["evaluated"] - before["evaluated"]), offered, cpu1 - cpu0,
               int(after["sink_ok"] - before["sink_ok"]), int(after["sink_dropped"] - before["sink_dropped"]),
               settle_s)


async def sink_alone(phoenix_url: str, scores: int) -> dict[str, Any]:
    """The sink's own CPU per score, in this process with nothing else running in it: `scores`
    retrieval spans are stored in Phoenix first (so no request waits for a span), then their
    outcomes (5 judged contexts each) are emitted to a Phoenix sink, and the process CPU from the
    first emit until the last annotation is written is divided by the scores."""
    import aiohttp
    from ctxprec.collector.components import shutdown
    from ctxprec.collector.exporters.config import ExportConfig
    from ctxprec.collector.exporters.sinks import SinkSettings, build_sinks
    from ctxprec.collector.metrics.registry import Metrics
    from ctxprec.collector.model import Decision, Outcome, Retrieval, RetrievedContext
    from ctxprec.collector.scoring.identity import ScorerIdentity
    from ctxprec.scorer.precision import summarize
    from ctxprec.scorer.reason import build_reason
    from ctxprec.scorer.result import ScoreResult, Verdict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    rng = random.Random(7)
    bodies = [build_request(rng, 50, f"{SERVICE}-alone") for _ in range(max(1, scores // 50))]
    outcomes: list[Any] = []
    for body in bodies:
        for span in (s for rs in ExportTraceServiceRequest.FromString(body).resource_spans
                     for ss in rs.scope_spans for s in ss.spans if s.name == "retrieve"):
            attributes = {kv.key: kv.value.string_value for kv in span.attributes}
            contexts = [RetrievedContext(attributes[f"retrieval.documents.{i}.document.content"], position=i)
                        for i in range(CONTEXTS)]
            relevant = [c.content.startswith("[relevant]") for c in contexts]
            summary = summarize(relevant)
            verdicts = [Verdict(i, rel, "The context answers it." if rel else "It does not.")
                        for i, rel in enumerate(relevant)]
            result = ScoreResult(score=summary.score, verdicts=verdicts, precision_at_k=summary.precision_at_k,
                                 reason=build_reason(score=summary.score, verdicts=verdicts, summary=summary,
                                                     reference_kind="output"),
                                 hit=summary.hit, first_relevant_rank=summary.first_relevant_rank,
                                 relevant_count=summary.relevant_count, k=CONTEXTS, scale=1.0, reference_kind="output")
            retrieval = Retrieval(trace_id=span.trace_id.hex(), span_id=span.span_id.hex(), service=SERVICE,
                                  query="How do I reset my password?", contexts=contexts, convention="openinference",
                                  end_time_unix_nano=span.end_time_unix_nano)
            outcomes.append(Outcome(retrieval, Decision.EVALUATED, result, record={}))
    async with aiohttp.ClientSession() as session:
        for body in bodies:
            async with session.post(f"{phoenix_url}/v1/traces", data=body,
                                    headers={"Content-Type": "application/x-protobuf"}) as response:
                await response.read()
    sys.path.insert(0, str(ROOT))
    from tests.helpers.phoenix import PhoenixClient

    client = PhoenixClient(phoenix_url)
    deadline = time.monotonic() + 120
    while len(await asyncio.to_thread(client.spans, f"{SERVICE}-alone", span_kind=["RETRIEVER"])) < len(outcomes):
        assert time.monotonic() < deadline, "Phoenix did not store the spans"
        await asyncio.sleep(1.0)
    metrics = Metrics()
    identity = ScorerIdentity(model="openai/stub", prompt_version="bench", annotator_kind="LLM", identifier="bench")
    (sink,) = build_sinks(SinkSettings.of(ExportConfig(sinks=f"phoenix={phoenix_url}")), identity, metrics)
    await sink.start()
    began_wall, began = time.monotonic(), time.process_time()
    for outcome in outcomes:
        sink.emit(outcome)
    while sink.queue.pending:
        await asyncio.sleep(0.2)
    cpu = time.process_time() - began
    wall = time.monotonic() - began_wall
    await shutdown(sink, 1.0)
    sent = metrics.registry.get_sample_value("ctxprec_exported_spans_total", {"exporter": "phoenix", "outcome": "ok"})
    return {"scores": len(outcomes), "sent": int(sent or 0), "cpu_s": round(cpu, 3), "wall_s": round(wall, 2),
            "cpu_ms_per_score": round(cpu / len(outcomes) * 1000, 4)}


def project(sink: bool) -> str:
    """Each run's spans in their own Phoenix project, so that the read-back finds annotated ones."""
    return f"{SERVICE}-{'sink' if sink else 'no-sink'}"


def annotations_per_span(phoenix_url: str, limit: int = 20) -> dict[str, Any]:
    """Reads a few scored spans' annotations back from Phoenix: 1 span + 5 document annotations each."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers.phoenix import PhoenixClient

    client = PhoenixClient(phoenix_url)
    spans = client.spans(project(True), span_kind=["RETRIEVER"])[:limit]
    ids = [s["context"]["span_id"] for s in spans]
    span_rows = client.span_annotations(project(True), ids)
    documents = client.document_annotations(ids)
    counts = sorted({sum(1 for r in span_rows if r["span_id"] == i) + len(documents[i]) for i in ids})
    return {"spans_read": len(ids), "annotations_per_scored_span": counts}


async def main_async(rate: float, seconds: float, pairs: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.phoenix import PhoenixServer

    phoenix = PhoenixServer()
    await asyncio.to_thread(phoenix.start)
    judge_port = free_port()
    judge = subprocess.Popen([sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", str(judge_port),
                              "--latency-ms", "5"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs: list[Run] = []
    try:
        await wait_http(f"http://127.0.0.1:{judge_port}/healthz")
        judge_url = f"http://127.0.0.1:{judge_port}/v1"
        for i in range(pairs):
            for sink in ((False, True) if i % 2 == 0 else (True, False)):
                # Seeds differ per run: the same trace ids twice would be one set of spans to Phoenix.
                run = await _run(sink, phoenix.url, judge_url, rate, seconds, seed=200 + 2 * i + sink)
                runs.append(run)
                print(f"  sink {'on ' if sink else 'off'}: {run.evaluated} scored, {run.cpu_ms_per_score:.3f} ms CPU "
                      f"per score, sink sent {run.sink_ok} dropped {run.sink_dropped}, settled in "
                      f"{run.seconds_to_settle:.1f} s after the traffic", flush=True)
        read_back = await asyncio.to_thread(annotations_per_span, phoenix.url)
        alone = await sink_alone(phoenix.url, 300 if pairs > 1 else 100)
        print(f"  the sink alone: {alone['cpu_ms_per_score']:.3f} ms CPU per score ({alone['scores']} scores)",
              flush=True)
    finally:
        judge.terminate()
        judge.wait(timeout=30)
        await asyncio.to_thread(phoenix.cleanup)
    off = [r.cpu_ms_per_score for r in runs if not r.sink]
    on = [r.cpu_ms_per_score for r in runs if r.sink]
    ratios = [b / a for a, b in zip(off, on)]
    ratio = statistics.median(ratios)
    off_med = statistics.median(off)
    return {
        "description": "CPU of the whole `ctxprec serve` process per score, span mode forwarding to a real "
                       "Phoenix, with --sink phoenix (1 span + 5 document annotations per score) / without",
        "goal": "the sink adds < 10% CPU per score",
        "offered_per_s": rate,
        "seconds_per_run": seconds,
        "runs": [{"sink": r.sink, "evaluated": r.evaluated, "offered": r.offered, "cpu_s": round(r.cpu_s, 3),
                  "cpu_ms_per_score": round(r.cpu_ms_per_score, 4), "sink_sent": r.sink_ok,
                  "sink_dropped": r.sink_dropped, "seconds_to_settle": round(r.seconds_to_settle, 2)} for r in runs],
        "pair_ratios": [round(x, 4) for x in ratios],
        "baseline_cpu_ms_per_score": round(off_med, 4),
        "with_sink_cpu_ms_per_score": round(off_med * ratio, 4),
        "ratio": round(ratio, 4),
        "added_fraction": round(ratio - 1, 4),
        "goal_met": ratio - 1 < 0.10,
        "added_cpu_ms_per_score": round(off_med * (ratio - 1), 4),
        # The sharper figure of what the sink costs: its own CPU, measured alone (emit, batching,
        # JSON, HTTP), and that as a share of the sidecar's CPU per score without it.
        "sink_alone": alone,
        "sink_alone_share_of_baseline": round(alone["cpu_ms_per_score"] / off_med, 4),
        "phoenix_read_back": read_back,
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rate, seconds, pairs = (10.0, 15.0, 1) if args.quick else (10.0, 30.0, 3)
    result = asyncio.run(main_async(rate, seconds, pairs))
    path = write_result("sink_overhead", result, quick=args.quick)
    print(f"sink adds {result['added_fraction']:+.1%} CPU per score "
          f"({result['baseline_cpu_ms_per_score']:.3f} -> {result['with_sink_cpu_ms_per_score']:.3f} ms); "
          f"annotations per scored span {result['phoenix_read_back']['annotations_per_scored_span']}; wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
