"""Overload: offer ~10x what the judge can take and check that the sidecar sheds instead of
growing, then resumes scoring at full rate once the load falls.

`ctxprec serve` and the stub judge run as their own processes; this process generates OTLP/HTTP
protobuf RAG traces at a fixed rate and samples the sidecar's RSS (psutil) and /metrics every
second. The judge's capacity is `workers / latency` (each worker waits on one judge call); that
capacity is the baseline the measured scoring rate is compared with.

Phases: nominal (half of capacity), overload (10x capacity, 60 s; --quick 8 s), recovery (half
of capacity). Pass criteria printed at the end: RSS under the cap throughout, the sidecar alive,
shed work counted as `overloaded`, scoring at capacity during overload, and in the last part of
recovery every offered retrieval evaluated and none shed.

    .venv/bin/python -m bench.overload [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.common import wait_http, write_result
from tests.helpers.processes import free_port
from tests.helpers.rag_traces import rag_request

ROOT = Path(__file__).resolve().parent.parent
SERVICE = "overload-app"


def build_request(rng: random.Random, traces: int) -> bytes:
    """`traces` RAG traces (root, OpenInference retriever with 4 documents, LLM), ended now."""
    def documents() -> list[tuple[str | None, str]]:
        return [(None, f"{'[relevant]' if rng.random() < 0.6 else '[irrelevant]'} document {rng.getrandbits(32)} "
                       f"about accounts " * 4) for _ in range(4)]

    return rag_request(rng, traces, resource={"service.name": SERVICE}, documents=documents,
                       retriever=lambda: ("kb", {}))


@dataclass
class Phase:
    name: str
    offered_per_s: float
    seconds: float
    offered: int = 0
    send_errors: int = 0
    start: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)
    tail_start: dict[str, float] = field(default_factory=dict)  # counters at 50% of the phase
    tail_offered_at_start: int = 0
    max_rss_mb: float = 0.0


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url) as response:
        text = await response.text()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ctxprec_samples_total" and sample.labels.get("service") == SERVICE:
                out[sample.labels["decision"]] = out.get(sample.labels["decision"], 0.0) + sample.value
            elif sample.name in ("ctxprec_queue_depth", "ctxprec_traces_buffered"):
                out[sample.name] = sample.value
    return out


def delta(a: dict[str, float], b: dict[str, float], key: str) -> float:
    return b.get(key, 0.0) - a.get(key, 0.0)


async def run_phase(phase: Phase, session: aiohttp.ClientSession, ingest_url: str, metrics_url: str,
                    proc: psutil.Process, rng: random.Random, rss_log: list[float]) -> None:
    tick = 0.1
    phase.start = await scrape(session, metrics_url)
    loop = asyncio.get_running_loop()
    began = loop.time()
    carry = 0.0
    next_sample = began
    pending: set[asyncio.Task[None]] = set()

    async def send(body: bytes, n: int) -> None:
        try:
            async with session.post(ingest_url, data=body,
                                    headers={"Content-Type": "application/x-protobuf"}) as response:
                await response.read()
                if response.status != 200:
                    phase.send_errors += n
        except aiohttp.ClientError:
            phase.send_errors += n

    while (now := loop.time()) - began < phase.seconds:
        carry += phase.offered_per_s * tick
        n = int(carry)
        carry -= n
        if n:
            task = asyncio.create_task(send(build_request(rng, n), n))
            pending.add(task)
            task.add_done_callback(pending.discard)
            phase.offered += n
        if now >= next_sample:
            rss = proc.memory_info().rss / 2**20
            rss_log.append(rss)
            phase.max_rss_mb = max(phase.max_rss_mb, rss)
            next_sample += 1.0
        if not phase.tail_start and now - began >= phase.seconds / 2:
            phase.tail_start = await scrape(session, metrics_url)
            phase.tail_offered_at_start = phase.offered
        await asyncio.sleep(max(0.0, began + (int((now - began) / tick) + 1) * tick - loop.time()))
    if pending:
        await asyncio.wait(pending, timeout=10)
    phase.end = await scrape(session, metrics_url)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    capacity = args.workers / (args.latency_ms / 1000)
    judge_port, http_port, metrics_port = free_port(), free_port(), free_port()
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    judge = subprocess.Popen([sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", str(judge_port),
                              "--latency-ms", str(args.latency_ms)], env=env, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sidecar = subprocess.Popen(
        [sys.executable, "-m", "ctxprec.collector.serve", "--otlp-grpc", "off", "--otlp-http", f"127.0.0.1:{http_port}",
         "--metrics", f"127.0.0.1:{metrics_port}", "--judge-model", "openai/stub",
         "--judge-api-base", f"http://127.0.0.1:{judge_port}/v1", "--judge-api-key", "bench",
         "--workers", str(args.workers), "--judge-concurrency", str(args.workers), "--queue-size", str(args.queue_size),
         "--max-rss-mb", str(args.max_rss_mb), "--quiet-period", "0.2", "--max-wait", "5", "--log-level", "warning"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rss_log: list[float] = []
    phases = [
        Phase("nominal", capacity * 0.5, args.nominal_s),
        Phase("overload", capacity * args.factor, args.overload_s),
        Phase("recovery", capacity * 0.5, args.recovery_s),
    ]
    try:
        await wait_http(f"http://127.0.0.1:{judge_port}/healthz")
        await wait_http(f"http://127.0.0.1:{metrics_port}/readyz")
        proc = psutil.Process(sidecar.pid)
        rng = random.Random(1)
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(connector=connector) as session:
            for phase in phases:
                await run_phase(phase, session, f"http://127.0.0.1:{http_port}/v1/traces",
                                f"http://127.0.0.1:{metrics_port}/metrics", proc, rng, rss_log)
                print(f"  {phase.name:9s} offered {phase.offered / phase.seconds:7.1f}/s  "
                      f"evaluated {delta(phase.start, phase.end, 'evaluated') / phase.seconds:6.1f}/s  "
                      f"overloaded {delta(phase.start, phase.end, 'overloaded'):7.0f}  max RSS {phase.max_rss_mb:6.1f} MB",
                      flush=True)
        alive = sidecar.poll() is None
    finally:
        for p in (sidecar, judge):
            if p.poll() is None:
                p.terminate()
        for p in (sidecar, judge):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    stderr_tail = (sidecar.stderr.read().decode(errors="replace")[-2000:] if sidecar.stderr else "")

    nominal, overload, recovery = phases
    over_eval_rate = delta(overload.start, overload.end, "evaluated") / overload.seconds
    tail_seconds = recovery.seconds / 2
    tail_offered = recovery.offered - recovery.tail_offered_at_start
    tail_evaluated = delta(recovery.tail_start, recovery.end, "evaluated")
    tail_shed = delta(recovery.tail_start, recovery.end, "overloaded")
    total_offered = sum(p.offered for p in phases)
    decided = sum(v for k, v in phases[-1].end.items() if not k.startswith("ctxprec_"))
    result = {
        "benchmark": "overload",
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "settings": {"workers": args.workers, "judge_latency_ms": args.latency_ms, "queue_size": args.queue_size,
                     "max_rss_mb": args.max_rss_mb, "overload_factor": args.factor,
                     "phase_seconds": [p.seconds for p in phases]},
        "baseline_judge_capacity_per_s": round(capacity, 2),
        "phases": [{
            "name": p.name, "offered_per_s": round(p.offered / p.seconds, 1),
            "evaluated_per_s": round(delta(p.start, p.end, "evaluated") / p.seconds, 2),
            "overloaded": int(delta(p.start, p.end, "overloaded")), "failed": int(delta(p.start, p.end, "failed")),
            "send_errors": p.send_errors, "max_rss_mb": round(p.max_rss_mb, 1)} for p in phases],
        "overload_scoring_rate_vs_capacity": round(over_eval_rate / capacity, 3),
        "overload_offered_vs_capacity": round(overload.offered / overload.seconds / capacity, 2),
        "recovery_tail": {"seconds": tail_seconds, "offered": tail_offered, "evaluated": int(tail_evaluated),
                          "overloaded": int(tail_shed)},
        "max_rss_mb": round(max(rss_log, default=0.0), 1),
        "sidecar_alive_at_end": alive,
        "offered_total": total_offered,
        "decided_total": int(decided),
    }
    checks = {
        "rss_under_cap": result["max_rss_mb"] < args.max_rss_mb,
        "no_crash": alive,
        "shed_counted_as_overloaded": result["phases"][1]["overloaded"] > 0,
        "scoring_at_capacity_under_overload": result["overload_scoring_rate_vs_capacity"] >= 0.8,
        # After the backlog drains, what is offered is scored and nothing is shed (±1 s of traffic in flight).
        "recovery_full_rate": tail_shed == 0 and tail_evaluated >= tail_offered - recovery.offered_per_s * 1.5,
    }
    result["checks"] = checks
    result["passed"] = all(checks.values())
    if not alive:
        result["sidecar_stderr_tail"] = stderr_tail
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 s of overload instead of 60 s")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=200.0, help="stub judge latency")
    parser.add_argument("--queue-size", type=int, default=100)
    parser.add_argument("--max-rss-mb", type=float, default=512.0)
    parser.add_argument("--factor", type=float, default=10.0, help="overload as a multiple of judge capacity")
    args = parser.parse_args()
    args.nominal_s, args.overload_s, args.recovery_s = (3.0, 8.0, 8.0) if args.quick else (10.0, 60.0, 20.0)
    print(f"overload: judge capacity {args.workers / (args.latency_ms / 1000):.0f} scores/s, offering "
          f"{args.factor:g}x for {args.overload_s:.0f} s", flush=True)
    result = asyncio.run(main_async(args))
    write_result("overload", result, quick=args.quick)
    print(f"baseline (judge capacity): {result['baseline_judge_capacity_per_s']} scores/s; "
          f"under {result['overload_offered_vs_capacity']}x load ctxprec scored at "
          f"{result['overload_scoring_rate_vs_capacity']:.2f}x capacity; max RSS {result['max_rss_mb']} MB "
          f"(cap {args.max_rss_mb:g}); recovery tail: offered {result['recovery_tail']['offered']}, "
          f"evaluated {result['recovery_tail']['evaluated']}, shed {result['recovery_tail']['overloaded']}")
    print("checks: " + ", ".join(f"{k}={'ok' if v else 'FAIL'}" for k, v in result["checks"].items()))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
