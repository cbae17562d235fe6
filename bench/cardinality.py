"""What many service and retriever names cost the scrape: a whole `ctxprec serve` process is sent
one scored retrieval for each of 50 services x 50 retrievers (every name under its own cap of
50), then /metrics is scraped (series, bytes, seconds) and /diagnostics/top_k read (bytes). With
`--baseline REF` the same run is made on that git ref's code first, and the ratios are reported.

    .venv/bin/python -m bench.cardinality --baseline main
    .venv/bin/python -m bench.cardinality --quick          # 20 x 20, this tree only"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import baseline_code, env_for, machine, wait_http, wait_port, write_result
from tests.helpers.processes import free_port, stop_process
from tests.helpers.rag_traces import openinference_retriever, request_with, span, trace_id

SCRAPES = 5
# The goal: what the series budget bounds, whatever the names.
MAX_SCRAPE_BYTES = 2_000_000
MAX_TOP_K_BYTES = 150_000


def requests(services: int, retrievers: int, per_request: int = 50) -> list[bytes]:
    """One trace per (service, retriever): a root span and an OpenInference retriever named for it."""
    bodies: list[bytes] = []
    batch: list[tuple[str, list[Any]]] = []
    for s in range(services):
        for r in range(retrievers):
            trace = trace_id(True)
            root = span(trace, "rag.query", {"openinference.span.kind": "CHAIN", "input.value": "q",
                                              "output.value": "reset the password in settings"})
            retriever = openinference_retriever(trace, root.span_id)
            retriever.name = f"retriever-{r:04d}"
            batch.append((f"service-{s:04d}", [root, retriever]))
            if len(batch) == per_request:
                bodies.append(request_with(batch).SerializeToString())
                batch = []
    if batch:
        bodies.append(request_with(batch).SerializeToString())
    return bodies


async def measure(code: Path | None, bodies: list[bytes], retrievals: int) -> dict[str, Any]:
    judge_port, http_port, metrics_port = free_port(), free_port(), free_port()
    env = env_for(code)
    judge = subprocess.Popen([sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", str(judge_port)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    serve = subprocess.Popen(
        [sys.executable, "-m", "ctxprec.collector.cli", "serve", "--otlp-grpc", "off",
         "--otlp-http", f"127.0.0.1:{http_port}", "--metrics", f"127.0.0.1:{metrics_port}",
         "--judge-model", "openai/stub", "--judge-api-base", f"http://127.0.0.1:{judge_port}/v1",
         "--judge-api-key", "bench", "--sample-rate", "1", "--quiet-period", "0.2", "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{metrics_port}"
    try:
        wait_port(judge_port)
        await wait_http(f"{base}/readyz")
        async with aiohttp.ClientSession() as session:
            for body in bodies:
                async with session.post(f"http://127.0.0.1:{http_port}/v1/traces", data=body,
                                        headers={"Content-Type": "application/x-protobuf"}) as response:
                    await response.read()
            deadline = time.monotonic() + 300
            decided = 0.0
            while time.monotonic() < deadline:
                async with session.get(f"{base}/metrics") as response:
                    text = await response.text()
                decided = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                              if line.startswith("ctxprec_samples_total{"))
                if decided >= retrievals:
                    break
                await asyncio.sleep(1.0)
            seconds, size, series = [], 0, 0
            for _ in range(SCRAPES):
                started = time.perf_counter()
                async with session.get(f"{base}/metrics") as response:
                    body = await response.read()
                seconds.append(time.perf_counter() - started)
                size = len(body)
                series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
            async with session.get(f"{base}/diagnostics/top_k") as response:
                top_k = await response.read()
                top_k_status = response.status
    finally:
        for proc in (serve, judge):
            stop_process(proc)
    return {"decided": decided, "series": series, "scrape_bytes": size,
            "scrape_s": round(statistics.median(seconds), 4), "top_k_bytes": len(top_k), "top_k_status": top_k_status}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 services x 20 retrievers")
    parser.add_argument("--baseline", help="a git ref whose code is measured first, in the same run")
    args = parser.parse_args(argv)
    services = retrievers = 20 if args.quick else 50
    bodies = requests(services, retrievers)
    runs: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if args.baseline:
            commit, path = stack.enter_context(baseline_code(args.baseline))
            before = asyncio.run(measure(path, bodies, services * retrievers))
            runs["before"] = {"ref": args.baseline, "commit": commit, **before}
            print("before:", runs["before"], flush=True)
        runs["after"] = asyncio.run(measure(None, bodies, services * retrievers))
        print("after: ", runs["after"], flush=True)
    result: dict[str, Any] = {
        "benchmark": "cardinality",
        "description": f"a whole ctxprec serve sent one scored retrieval for each of {services} services x "
                       f"{retrievers} retrievers (default caps of 50 names each): /metrics series, bytes and "
                       f"seconds (median of {SCRAPES} scrapes), /diagnostics/top_k bytes",
        "quick": args.quick, **runs,
        "goal_met": runs["after"]["scrape_bytes"] < MAX_SCRAPE_BYTES and runs["after"]["top_k_bytes"] < MAX_TOP_K_BYTES,
        "machine": machine()}
    if "before" in runs:
        before, after = runs["before"], runs["after"]
        result["after_over_before"] = {key: round(after[key] / before[key], 4)
                                       for key in ("series", "scrape_bytes", "scrape_s", "top_k_bytes")}
        print("after / before:", result["after_over_before"])
    print(f"wrote {write_result('cardinality', result, quick=args.quick)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
