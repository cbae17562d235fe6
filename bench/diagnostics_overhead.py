"""Diagnostics overhead: CPU per score with and without the DiagnosticsSink, in the same run.

Two measurements:

1. In process, the scoring workers' per-score path after the judge (`ScoringWorkers._succeed`:
   the score record with document identities, then the result fan-out: MetricsSink with drift,
   the decision count), fed precomputed results for 5-context retrievals of documents drawn from a Zipf(1)
   pool of 5,000: once with the MetricsSink alone (the baseline) and once with the
   DiagnosticsSink added, in alternating blocks, process CPU time per score. Both with contexts
   that carry ids and with contexts named by the hash of their text.
2. Through `ctxprec serve` in its own process: OTLP/HTTP protobuf RAG traces at a fixed rate
   (sample rate 1), the stub judge in another process, sidecar CPU time (psutil) per evaluated
   retrieval, with diagnostics off and on, in alternating runs. The sidecar is started by this
   script (`--serve-child`), which runs `serve()` with `--diagnostics on` or `off` and times every
   result sink.

Goal: diagnostics add under 5% CPU per score.

    .venv/bin/python -m bench.diagnostics_overhead            # full
    .venv/bin/python -m bench.diagnostics_overhead --quick    # shorter
    .venv/bin/python -m bench.diagnostics_overhead --no-serve # part 1 only
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
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
DOCUMENTS = 5000
CONTEXTS = 5
SERVICE = "bench-app"
SLICE_ATTRIBUTES = ("index.version", "tenant.tier")
WORDS = ("password reset account billing invoice refund shipping order login security email settings profile "
         "support ticket subscription plan upgrade cancel device mobile app").split()


def zipf_picker(rng: random.Random) -> Any:
    cumulative = list(itertools.accumulate(1.0 / r for r in range(1, DOCUMENTS + 1)))

    def pick(k: int) -> list[int]:
        chosen: list[int] = []
        while len(chosen) < k:
            (doc,) = rng.choices(range(DOCUMENTS), cum_weights=cumulative, k=1)
            if doc not in chosen:
                chosen.append(doc)
        return chosen

    return pick


def document_text(doc: int) -> str:
    rng = random.Random(doc)
    return f"Document {doc}. " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 200)))


# --- part 1: the in-process fan-out ----------------------------------------------------------------


class _Engine:
    """What ScoringWorkers reads off an engine on the success path."""

    model = "openai/stub"
    prompt_version = "bench"
    annotator_kind = "LLM"
    fingerprint = "bench-fingerprint"
    scale = 1.0


def _workloads(count: int, with_ids: bool, seed: int = 16) -> list[tuple[Any, Any]]:
    from ctxprec.collector.model import Retrieval, RetrievedContext
    from ctxprec.scorer.precision import summarize
    from ctxprec.scorer.reason import build_reason
    from ctxprec.scorer.result import JudgeUsage, ScoreResult, Verdict

    rng = random.Random(seed)
    pick = zipf_picker(rng)
    out = []
    for i in range(count):
        docs = pick(CONTEXTS)
        relevant = [rng.random() < (0.7 if rank < 3 else 0.15) for rank in range(CONTEXTS)]
        contexts = [RetrievedContext(content=document_text(d), id=f"kb-{d}" if with_ids else None) for d in docs]
        retrieval = Retrieval(trace_id=f"{i:032x}", span_id=f"{i:016x}", service=SERVICE, query="how do I reset it",
                              contexts=contexts, retriever=rng.choice(["dense", "bm25"]), output="answer",
                              attributes={"index.version": rng.choice(["v1", "v2"]), "tenant.tier": rng.choice(["free", "pro"])},
                              end_time_unix_nano=time.time_ns(), answer_source="llm_span")
        summary = summarize(relevant)
        usage = JudgeUsage(model="openai/stub", prompt_version="bench", calls=1, prompt_tokens=900, completion_tokens=80)
        verdicts = [Verdict(j, rel, "The context answers it." if rel else "It does not.") for j, rel in enumerate(relevant)]
        reason = build_reason(score=summary.score, verdicts=verdicts, summary=summary, reference_kind="output")
        result = ScoreResult(score=summary.score, reason=reason, verdicts=verdicts,
                             precision_at_k=summary.precision_at_k, hit=summary.hit,
                             first_relevant_rank=summary.first_relevant_rank, relevant_count=summary.relevant_count,
                             k=CONTEXTS, scale=1.0, reference_kind="output", usage=usage)
        out.append((retrieval, result))
    return out


def _workers(diagnostics: bool) -> Any:
    from ctxprec.collector.diagnostics.settings import DiagnosticsSettings
    from ctxprec.collector.diagnostics.sink import DiagnosticsSink
    from ctxprec.collector.exporters.fanout import ResultFanout
    from ctxprec.collector.metrics.drift import DriftMonitor
    from ctxprec.collector.metrics.registry import Metrics
    from ctxprec.collector.metrics.sink import MetricsSink
    from ctxprec.collector.scoring.identity import ScorerIdentity
    from ctxprec.collector.scoring.workers import ScoringWorkers

    metrics = Metrics()
    drift = DriftMonitor(metrics)
    fanout = ResultFanout(metrics, [MetricsSink(metrics, drift)])
    if diagnostics:
        sink = DiagnosticsSink(DiagnosticsSettings(slice_attributes=SLICE_ATTRIBUTES), metrics=metrics, drift=drift)
        drift.on_alarm = sink.explainer
        fanout.add(sink)
    engine = _Engine()
    return ScoringWorkers(engine, downstream=fanout, identity=ScorerIdentity.of_engine(engine), metrics=metrics)


def _block(workers: Any, work: list[tuple[Any, Any]]) -> float:
    """CPU seconds per score over one pass of `work`."""
    succeed = workers._succeed
    started = time.process_time()
    for retrieval, result in work:
        succeed(retrieval, result)
    return (time.process_time() - started) / len(work)


def in_process(count: int, rounds: int, with_ids: bool) -> dict[str, Any]:
    """Alternating blocks of `count` scores, `rounds` of each. On a shared machine single blocks
    swing by tens of percent, so the figures are the median of the per-round ratios (each round
    pairs an off and an on block run back to back) and the ratio of the fastest blocks."""
    from ctxprec.scorer.documents import identity

    work = _workloads(count, with_ids)
    off, on = _workers(False), _workers(True)
    for _ in range(3):  # warm both: first-touch costs (label children, summaries filling)
        _block(off, work)
        _block(on, work)
    off_s: list[float] = []
    on_s: list[float] = []
    for i in range(rounds):
        gc.collect()
        # Alternate which goes first, so that drift in the machine's speed hits both alike.
        if i % 2 == 0:
            off_s.append(_block(off, work))
            on_s.append(_block(on, work))
        else:
            on_s.append(_block(on, work))
            off_s.append(_block(off, work))
    identity_s = []
    for _ in range(5):
        started = time.process_time()
        for retrieval, _ in work:
            [identity(c) for c in retrieval.contexts]
        identity_s.append((time.process_time() - started) / len(work))
    ratios = [b / a for a, b in zip(off_s, on_s)]
    ratio = statistics.median(ratios)
    off_med = statistics.median(off_s)
    return {
        "contexts_carry_ids": with_ids,
        "scores_per_block": count,
        "rounds": rounds,
        "baseline_cpu_us_per_score": round(off_med * 1e6, 2),
        "with_diagnostics_cpu_us_per_score": round(off_med * ratio * 1e6, 2),
        "added_cpu_us_per_score": round(off_med * (ratio - 1) * 1e6, 2),
        "ratio": round(ratio, 4),
        "added_fraction": round(ratio - 1, 4),
        "fastest_blocks_ratio": round(min(on_s) / min(off_s), 4),
        "baseline_blocks_us": [round(x * 1e6, 1) for x in off_s],
        "diagnostics_blocks_us": [round(x * 1e6, 1) for x in on_s],
        # Part of the baseline (deliverable 1, not the diagnostics): naming the contexts in the record.
        "document_identity_us_per_score": round(min(identity_s) * 1e6, 2),
    }


# --- part 2: through `ctxprec serve` --------------------------------------------------------------


def build_request(rng: random.Random, pick: Any, traces: int) -> bytes:
    def documents() -> list[tuple[str | None, str]]:
        return [(f"kb-{doc}", ("[relevant]" if rng.random() < (0.7 if rank < 3 else 0.15) else "[irrelevant]")
                 + f" {document_text(doc)}") for rank, doc in enumerate(pick(CONTEXTS))]

    return rag_request(rng, traces, resource={"service.name": SERVICE, "tenant.tier": rng.choice(["free", "pro"])},
                       documents=documents,
                       retriever=lambda: (rng.choice(["dense", "bm25"]), {"index.version": rng.choice(["v1", "v2"])}))


async def _scrape(session: Any, url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    async with session.get(url) as response:
        text = await response.text()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ctxprec_samples_total" and sample.labels.get("service") == SERVICE:
                out[sample.labels["decision"]] = out.get(sample.labels["decision"], 0.0) + sample.value
            elif sample.name == "ctxprec_recommended_k" and sample.value == sample.value:
                out[f"recommended_k:{sample.labels['retriever']}"] = sample.value
    return out


@dataclass
class ServeRun:
    diagnostics: bool
    evaluated: int
    cpu_s: float
    offered: int
    recommended_k: dict[str, float]
    sink_us: dict[str, float]  # CPU per emit of each result sink, measured inside the sidecar

    @property
    def cpu_ms_per_score(self) -> float:
        return self.cpu_s / self.evaluated * 1000 if self.evaluated else float("nan")


async def _serve_run(diagnostics: bool, judge_url: str, rate: float, seconds: float, seed: int) -> ServeRun:
    import json
    import os
    import tempfile

    import aiohttp
    import psutil

    http_port, metrics_port = free_port(), free_port()
    stats_path = Path(tempfile.mkdtemp(prefix="ctxprec-bench-")) / "sinks.json"
    cmd = [sys.executable, "-m", "bench.diagnostics_overhead", "--serve-child", "--diagnostics", "on" if diagnostics else "off",
           "--sink-stats", str(stats_path), "--", "--otlp-grpc", "off", "--otlp-http", f"127.0.0.1:{http_port}", "--metrics", f"127.0.0.1:{metrics_port}",
           "--judge-model", "openai/stub", "--judge-api-base", judge_url, "--judge-api-key", "bench",
           "--sample-rate", "1", "--workers", "16", "--judge-concurrency", "16", "--quiet-period", "0.2",
           "--max-wait", "5", "--log-level", "warning"]
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    try:
        await wait_http(f"http://127.0.0.1:{metrics_port}/readyz")
        proc = psutil.Process(child.pid)
        rng = random.Random(seed)
        pick = zipf_picker(rng)
        ingest = f"http://127.0.0.1:{http_port}/v1/traces"
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        async with aiohttp.ClientSession() as session:

            async def offer(duration: float) -> int:
                sent = 0
                tick = 0.1
                began = time.monotonic()
                carry = 0.0
                while time.monotonic() - began < duration:
                    carry += rate * tick
                    n = int(carry)
                    carry -= n
                    if n:
                        body = build_request(rng, pick, n)
                        async with session.post(ingest, data=body, headers={"Content-Type": "application/x-protobuf"}) as r:
                            await r.read()
                        sent += n
                    await asyncio.sleep(max(0.0, tick - (time.monotonic() - began) % tick))
                return sent

            async def settle(expected: float) -> dict[str, float]:
                deadline = time.monotonic() + 30
                last = await _scrape(session, metrics_url)
                while time.monotonic() < deadline:
                    await asyncio.sleep(0.5)
                    now = await _scrape(session, metrics_url)
                    if sum(v for k, v in now.items() if ":" not in k) >= expected and now == last:
                        return now
                    last = now
                return last

            warm = await offer(2.0)
            before = await settle(warm)
            cpu0 = process_cpu_s(proc)
            offered = await offer(seconds)
            after = await settle(sum(v for k, v in before.items() if ":" not in k) + offered)
            cpu1 = process_cpu_s(proc)
        evaluated = int(after.get("evaluated", 0) - before.get("evaluated", 0))
        ks = {k.split(":", 1)[1]: v for k, v in after.items() if k.startswith("recommended_k:")}
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    sink_us = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    return ServeRun(diagnostics, evaluated, cpu1 - cpu0, offered, ks, sink_us)


async def through_serve(rate: float, seconds: float, pairs: int) -> dict[str, Any]:
    judge_port = free_port()
    judge = subprocess.Popen([sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", str(judge_port),
                              "--latency-ms", "5"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs: list[ServeRun] = []
    try:
        await wait_http(f"http://127.0.0.1:{judge_port}/healthz")
        url = f"http://127.0.0.1:{judge_port}/v1"
        for i in range(pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            for diagnostics in order:
                run = await _serve_run(diagnostics, url, rate, seconds, seed=100 + i)
                runs.append(run)
                print(f"  serve, diagnostics {'on ' if diagnostics else 'off'}: {run.evaluated} scored, "
                      f"{run.cpu_ms_per_score:.3f} ms CPU per score", flush=True)
    finally:
        judge.terminate()
        judge.wait(timeout=30)
    off = [r.cpu_ms_per_score for r in runs if not r.diagnostics]
    on = [r.cpu_ms_per_score for r in runs if r.diagnostics]
    # Runs come in back-to-back pairs; the machine's speed drifts between pairs far more than
    # within one, so the headline is the median of the per-pair ratios.
    ratios = [b / a for a, b in zip(off, on)]
    ratio = statistics.median(ratios)
    off_med = statistics.median(off)
    # The A/B difference is within the run-to-run noise of a shared machine, so the sink's own CPU,
    # timed around each emit inside the sidecar, is the sharper figure of what diagnostics add.
    in_sidecar = statistics.median(r.sink_us.get("DiagnosticsSink", 0.0) for r in runs if r.diagnostics)
    metrics_sink = statistics.median(r.sink_us.get("MetricsSink", 0.0) for r in runs)
    return {
        "offered_per_s": rate,
        "seconds_per_run": seconds,
        "runs": [{"diagnostics": r.diagnostics, "evaluated": r.evaluated, "offered": r.offered,
                  "cpu_s": round(r.cpu_s, 3), "cpu_ms_per_score": round(r.cpu_ms_per_score, 4),
                  "recommended_k": r.recommended_k, "sink_us_per_emit": r.sink_us} for r in runs],
        "pair_ratios": [round(x, 4) for x in ratios],
        "diagnostics_sink_us_per_score_in_sidecar": round(in_sidecar, 2),
        "metrics_sink_us_per_score_in_sidecar": round(metrics_sink, 2),
        "sink_share_of_baseline_cpu": round(in_sidecar / (off_med * 1000), 4),
        "baseline_cpu_ms_per_score": round(off_med, 4),
        "with_diagnostics_cpu_ms_per_score": round(off_med * ratio, 4),
        "ratio": round(ratio, 4),
        "added_fraction": round(ratio - 1, 4),
    }


# --- the serve child ---------------------------------------------------------------------------------


class TimedSink:
    """A result sink that times another's emit (process CPU), for the figure measured in place."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.seconds = 0.0
        self.calls = 0

    def emit(self, outcome: Any) -> None:
        started = time.process_time()
        try:
            self.sink.emit(outcome)
        finally:
            self.seconds += time.process_time() - started
            self.calls += 1


def serve_child(diagnostics: bool, serve_args: list[str], stats_path: str | None) -> int:
    import json
    import logging

    from ctxprec.collector import config as config_module
    from ctxprec.collector.serve import serve

    parser = argparse.ArgumentParser(prog="diagnostics-overhead serve child")
    config_module.add_arguments(parser)
    serve_args = [*serve_args, "--diagnostics", "on" if diagnostics else "off",
                  "--diagnostics-slice-attributes", ",".join(SLICE_ATTRIBUTES)]
    config = config_module.load(parser.parse_args(serve_args))
    logging.basicConfig(level=config.log_level.upper())

    timed: list[TimedSink] = []

    def attach(pipeline: Any) -> None:
        # Every sink timed in both modes, so that the timing's own cost is the same on both sides.
        timed.extend(TimedSink(sink) for sink in pipeline.fanout.sinks)
        pipeline.fanout.sinks = list(timed)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(config, stop=stop, on_start=attach)

    asyncio.run(main())
    if stats_path:
        Path(stats_path).write_text(json.dumps(
            {type(t.sink).__name__: t.seconds / t.calls * 1e6 if t.calls else 0.0 for t in timed}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-serve", action="store_true", help="only the in-process measurement")
    parser.add_argument("--serve-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--diagnostics", choices=("on", "off"), default="off", help=argparse.SUPPRESS)
    parser.add_argument("--sink-stats", default=None, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.serve_child:
        return serve_child(args.diagnostics == "on", [a for a in rest if a != "--"], args.sink_stats)

    count, rounds = (300, 10) if args.quick else (1000, 40)
    result: dict[str, Any] = {
        "benchmark": "diagnostics_overhead", "quick": args.quick, "machine": machine(), "goal_added_fraction": 0.05,
        "description": "CPU per score added by the DiagnosticsSink: in process (the scoring workers' fan-out alone) "
                       "and through ctxprec serve (A/B runs, and the sink's emit timed inside the sidecar)"}
    result["in_process"] = [in_process(count, rounds, with_ids=True), in_process(count, rounds, with_ids=False)]
    for part in result["in_process"]:
        print(f"in process ({'ids' if part['contexts_carry_ids'] else 'text hashes'}): baseline "
              f"{part['baseline_cpu_us_per_score']} us/score, with diagnostics {part['with_diagnostics_cpu_us_per_score']} "
              f"us/score: +{part['added_cpu_us_per_score']} us ({part['added_fraction']:+.1%})", flush=True)
    if not args.no_serve:
        rate, seconds, pairs = (100.0, 6.0, 1) if args.quick else (150.0, 15.0, 6)
        result["serve"] = asyncio.run(through_serve(rate, seconds, pairs))
        s = result["serve"]
        print(f"ctxprec serve: baseline {s['baseline_cpu_ms_per_score']} ms CPU/score, with diagnostics "
              f"{s['with_diagnostics_cpu_ms_per_score']} ms (median of pairs {s['added_fraction']:+.1%}, pairs "
              f"{s['pair_ratios']}); DiagnosticsSink.emit timed inside the sidecar: "
              f"{s['diagnostics_sink_us_per_score_in_sidecar']} us/score = {s['sink_share_of_baseline_cpu']:.1%} of "
              f"the baseline (MetricsSink: {s['metrics_sink_us_per_score_in_sidecar']} us)", flush=True)
        result["added_fraction"] = s["sink_share_of_baseline_cpu"]
    else:
        result["added_fraction"] = max(p["added_fraction"] for p in result["in_process"])
    result["goal_met"] = result["added_fraction"] < result["goal_added_fraction"]
    path = write_result("diagnostics_overhead", result, quick=args.quick)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
