"""The shadow judge's cost in live scoring throughput: `ctxprec serve` scoring as fast as its
judge lets it, with and without a shadow judge, in alternating runs of one invocation.

Each in its own process: the live judge (`ctxprec stub-judge`, 20 ms per answer), the shadow judge
(another stub judge, 20 ms), and `ctxprec serve` (OTLP/HTTP in, every trace sampled, 8 scoring
workers, canary off so that only the shadow differs). A run posts `retrievals` OpenInference RAG
traces of 5 contexts each (new texts every run: no verdict cache answers) as fast as the
receiver takes them and times from the first post until every retrieval is evaluated
(`ctxprec_samples_total{decision="evaluated"}`). With the shadow on, `--shadow-sample-rate 0.1`
(the default): a tenth of the scored retrievals are judged again by the shadow, beside them.

Goal: live scoring throughput with the shadow at least 95% of without.

    .venv/bin/python -m bench.shadow_overhead [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp

from bench.common import env_for, machine, post_all, prometheus_samples, wait_http, wait_port, write_result
from tests.helpers.processes import free_port
from tests.helpers.rag_traces import rag_request, words

TRACES_PER_REQUEST = 10
CONTEXTS = 5
JUDGE_LATENCY_MS = 20


def start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", *args], env={**env_for(None), "OPENAI_API_KEY": "bench"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def one_run(shadow: bool, retrievals: int, seed: int, live_port: int, shadow_port: int) -> dict[str, Any]:
    http_port, metrics_port = free_port(), free_port()
    flags = ["ctxprec.collector.cli", "serve", "--otlp-grpc", "off", "--otlp-http", f"127.0.0.1:{http_port}",
             "--metrics", f"127.0.0.1:{metrics_port}", "--sample-rate", "1", "--quiet-period", "0.2",
             "--judge-model", "openai/stub", "--judge-api-base", f"http://127.0.0.1:{live_port}/v1",
             "--judge-canary-mode", "off", "--workers", "8", "--queue-size", str(retrievals * 2),
             "--log-level", "warning"]
    if shadow:
        flags += ["--shadow-judge-model", "openai/shadow-stub", "--shadow-judge-api-base",
                  f"http://127.0.0.1:{shadow_port}/v1", "--shadow-judge-api-key", "bench"]
    serve = start(flags)
    try:
        wait_port(metrics_port, timeout=30)
        await wait_http(f"http://127.0.0.1:{metrics_port}/readyz")
        rng = random.Random(seed)

        def documents() -> list[tuple[str | None, str]]:
            return [(None, words(rng, 300)) for _ in range(CONTEXTS)]

        bodies = [rag_request(rng, TRACES_PER_REQUEST, resource={"service.name": "shop"}, documents=documents)
                  for _ in range(retrievals // TRACES_PER_REQUEST)]
        retrievals = len(bodies) * TRACES_PER_REQUEST
        async with aiohttp.ClientSession() as session:
            started = time.perf_counter()
            await post_all(session, f"http://127.0.0.1:{http_port}/v1/traces", bodies)
            deadline = started + 300
            while True:
                async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as response:
                    samples = prometheus_samples(await response.text())
                evaluated = samples.get(("ctxprec_samples_total", (("decision", "evaluated"), ("service", "shop"))), 0)
                if evaluated >= retrievals:
                    break
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"only {evaluated} of {retrievals} evaluated")
                await asyncio.sleep(0.1)
            seconds = time.perf_counter() - started
            # What the shadow got done meanwhile (it keeps going after; not waited for).
            shadow_judged = sum(v for (name, labels), v in samples.items()
                                if name == "ctxprec_shadow_samples_total" and ("outcome", "judged") in labels)
            shadow_skipped = sum(v for (name, labels), v in samples.items()
                                 if name == "ctxprec_shadow_samples_total" and ("outcome", "skipped_busy") in labels)
        return {"shadow": shadow, "retrievals": retrievals, "seconds": round(seconds, 3),
                "scores_per_s": round(retrievals / seconds, 1), "shadow_judged_by_then": shadow_judged,
                "shadow_skipped_busy": shadow_skipped}
    finally:
        stop(serve)


async def main_async(retrievals: int, pairs: int) -> dict[str, Any]:
    live_port, shadow_port = free_port(), free_port()
    judges = [start(["ctxprec.collector.stub_judge", "--port", str(port), "--latency-ms", str(JUDGE_LATENCY_MS)])
              for port in (live_port, shadow_port)]
    try:
        for port in (live_port, shadow_port):
            wait_port(port)
        await one_run(False, 200, 0, live_port, shadow_port)  # warm-up: imports, page cache
        runs = []
        for pair in range(pairs):
            for shadow in ((False, True) if pair % 2 == 0 else (True, False)):
                runs.append(await one_run(shadow, retrievals, 100 + len(runs), live_port, shadow_port))
    finally:
        stop(*judges)
    off = statistics.mean(r["scores_per_s"] for r in runs if not r["shadow"])
    on = statistics.mean(r["scores_per_s"] for r in runs if r["shadow"])
    return {"benchmark": "shadow_overhead", "machine": machine(),
            "settings": {"judge_latency_ms": JUDGE_LATENCY_MS, "workers": 8, "shadow_sample_rate": 0.1,
                         "contexts": CONTEXTS, "retrievals_per_run": retrievals, "pairs": pairs},
            "runs": runs, "scores_per_s_without_shadow": round(off, 1), "scores_per_s_with_shadow": round(on, 1),
            "ratio_with_over_without": round(on / off, 4), "goal_met": on / off >= 0.95}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer retrievals, one pair of runs")
    args = parser.parse_args()
    result = asyncio.run(main_async(300 if args.quick else 2000, 1 if args.quick else 3))
    path = write_result("shadow_overhead", result, quick=args.quick)
    print(f"wrote {path}: with/without = {result['ratio_with_over_without']}")


if __name__ == "__main__":
    main()
