"""One huge agent trace into `ctxprec serve`: how long the event loop stalls and how much CPU the
sidecar spends, at 5k, 10k and 20k spans (one retrieval per 40 spans), the code of a git ref
(default `main`) and this tree's in the same run, rounds interleaved.

The trace is Pydantic AI's captured spans replicated (tests/helpers/huge_trace.py), sent as an
exporter sends it: OTLP/HTTP protobuf requests of 512 spans, the outer span last. Each run is its
own process: `serve` in its event loop with a 10 ms ticker beside it (the stall is the ticker's
largest gap less its 10 ms: what a /healthz probe waits at worst), the stub judge in a process of
its own, every trace sampled; the run ends when every retrieval is decided. CPU is the run's
process CPU from the first request to the last decision (sender included, the same for both).
"Linear" is the CPU per span at 20k over that at 5k.

    .venv/bin/python -m bench.huge_trace [--ref main] [--rounds 1] [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, baseline_code, env_for, machine, write_result

SIZES = (125, 250, 500)  # units of 40 spans: 5,001, 10,001 and 20,001 spans
QUICK_SIZES = (25, 50, 100)  # 1,001 to 4,001 spans: the baseline's square stays short
LINEAR_WITHIN = 1.3
STALL_GOAL_S = 1.0
TICK_S = 0.01


async def _child(units: int) -> dict[str, Any]:
    import aiohttp

    from ctxprec.collector.serve import serve
    from tests.helpers.huge_trace import huge_trace, requests_of
    from tests.kafka.inprocess import load_config

    _, spans = huge_trace(units)
    bodies = requests_of(spans)
    judge = subprocess.Popen([sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", "0"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert judge.stdout is not None
    url = judge.stdout.readline().strip().rsplit(" ", 1)[-1]
    config = load_config(["--otlp-grpc", "off", "--otlp-http", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                          "--sample-rate", "1", "--judge-model", "openai/stub", "--judge-api-base", url,
                          "--judge-api-key", "bench", "--quiet-period", "0.2", "--log-level", "error"])
    ready, stop = asyncio.Event(), asyncio.Event()
    pipelines: list[Any] = []
    task = asyncio.create_task(serve(config, ready=ready, stop=stop, on_start=pipelines.append))
    try:
        await asyncio.wait_for(ready.wait(), 60)
        pipeline = pipelines[0]
        gaps: list[float] = []
        ticking = True

        async def ticker() -> None:
            last = time.perf_counter()
            while ticking:
                await asyncio.sleep(TICK_S)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        target = f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces"
        cpu0, wall0 = time.process_time(), time.perf_counter()
        async with aiohttp.ClientSession() as session:
            for body in bodies:
                async with session.post(target, data=body, headers={"Content-Type": "application/x-protobuf"}) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"{target} answered {r.status}")
        # The baseline's square at 20k spans takes minutes of CPU, more on a busy machine.
        deadline = time.monotonic() + 2400
        while sum(pipeline.fanout.counts.values()) < units:
            if task.done() or time.monotonic() > deadline:
                raise RuntimeError(f"serve stopped or stalled at {pipeline.fanout.counts}")
            await asyncio.sleep(0.005)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        ticking = False
        await tick
        counts = pipeline.fanout.counts
    finally:
        stop.set()
        await asyncio.wait_for(task, 120)
        judge.terminate()
        judge.wait(10)
    return {"spans": len(spans), "retrievals": units, "decisions": counts,
            "stall_s": round(max(gaps) - TICK_S, 4), "cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}


def _run(units: int, code: Path | None) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "bench.huge_trace", "--child", str(units)], cwd=ROOT,
                          env=env_for(code), capture_output=True, text=True, timeout=3000)
    if proc.returncode:
        raise SystemExit(f"bench.huge_trace --child {units} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for units in sorted({r["retrievals"] for r in runs}):
        mine = [r for r in runs if r["retrievals"] == units]
        out[str(mine[0]["spans"])] = {
            "stall_s": statistics.median(r["stall_s"] for r in mine),
            "cpu_s": statistics.median(r["cpu_s"] for r in mine),
            "wall_s": statistics.median(r["wall_s"] for r in mine),
            "decisions": mine[0]["decisions"],
        }
    sizes = sorted(out, key=int)
    small, large = out[sizes[0]], out[sizes[-1]]
    per_span = (large["cpu_s"] / int(sizes[-1])) / (small["cpu_s"] / int(sizes[0]))
    return {"sizes": out, "cpu_per_span_largest_over_smallest": round(per_span, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", default="main", help="git ref whose code is 'before'")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds per size and code (the baseline's 20k run takes minutes)")
    parser.add_argument("--quick", action="store_true", help="one round, 1k to 4k spans")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(asyncio.run(_child(args.child))), flush=True)
        return 0
    sizes = QUICK_SIZES if args.quick else SIZES
    rounds = 1 if args.quick else args.rounds
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    with baseline_code(args.ref) as (commit, path):
        for n in range(rounds):
            for units in sizes:
                for name, code, runs in (("before", path, before), ("after", None, after)):
                    result = _run(units, code)
                    runs.append(result)
                    print(f"round {n + 1} {name}: {result['spans']} spans: stall {result['stall_s']:.3f} s, "
                          f"CPU {result['cpu_s']:.2f} s, decisions {result['decisions']}", flush=True)
    data = {
        "benchmark": "huge_trace",
        "description": "one agent trace (Pydantic AI spans replicated, one retrieval per 40 spans) into serve over "
                       "OTLP/HTTP in 512-span requests; stall = largest gap of a 10 ms ticker in serve's loop less "
                       "10 ms; CPU from the first request to the last decision; medians of the rounds; "
                       f"before = {args.ref}, after = this tree",
        "machine": machine(), "baseline_ref": args.ref, "baseline_commit": commit, "rounds": rounds,
        "before": _summary(before), "after": _summary(after),
    }
    worst_stall = max(size["stall_s"] for size in data["after"]["sizes"].values())
    data["goal_met"] = (data["after"]["cpu_per_span_largest_over_smallest"] <= LINEAR_WITHIN
                        and worst_stall < STALL_GOAL_S)
    print(json.dumps({k: data[k] for k in ("before", "after")}, indent=2))
    write_result("huge_trace", data, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
