"""What adaptive concurrency costs against a judge whose latency does not grow with load, and what
it keeps against one that answers one request at a time: `ctxprec score` (a cold CLI, as users
run it) with the adaptive limit on and off, rounds interleaved in one run.

1. Constant latency: the stub judge in its own process at 100 ms a request whatever the load
   (a hosted API seen from a small client), 200 samples of 10 contexts, `--concurrency 32`.
   Goal: adaptive on within 1.15x of adaptive off (seconds, median of the rounds).
2. One slot: the stub judge serving one request at a time (`--slots 1`, as llama.cpp's server
   does), 30 samples: the adaptive limit must keep about one request waiting in the judge's
   queue (the stub's `max_queued`) and score every sample.

    .venv/bin/python -m bench.adaptive_concurrency            # 3 rounds
    .venv/bin/python -m bench.adaptive_concurrency --quick    # 1 round"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import machine, write_result
from bench.score_throughput import WORDS, start_stub
from tests.helpers.processes import stop_process

CTXPREC = Path(sys.executable).with_name("ctxprec")
GOAL = 1.15


def make_events(path: Path, count: int, contexts: int, seed: int = 5) -> None:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            out.write(json.dumps({
                "trace_id": f"{i:032x}", "span_id": f"{i:016x}", "service": "bench",
                "query": " ".join(rng.sample(WORDS, 4)),
                "contexts": [" ".join(rng.choice(WORDS) for _ in range(40)) for _ in range(contexts)],
                "output": " ".join(rng.sample(WORDS, 12)),
            }) + "\n")


def control(url: str, **changes: Any) -> None:
    request = urllib.request.Request(url.removesuffix("/v1") + "/control", data=json.dumps(changes).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(request, timeout=10).close()


def stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=10) as response:
        return json.loads(response.read())


def score(url: str, events: Path, *, adaptive: bool, concurrency: int) -> dict[str, Any]:
    out = events.with_suffix(f".{'on' if adaptive else 'off'}.jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPREC_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    control(url, reset_stats=True)
    started = time.perf_counter()
    done = subprocess.run(
        [str(CTXPREC), "score", str(events), "-o", str(out), "--judge-model", "openai/stub",
         "--judge-api-base", url, "--judge-api-key", "unused", "--concurrency", str(concurrency),
         "--judge-adaptive-concurrency" if adaptive else "--no-judge-adaptive-concurrency"],
        env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"ctxprec score failed ({done.returncode}):\n{done.stderr[-2000:]}")
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    judge = stats(url)
    return {"adaptive": adaptive, "seconds": round(seconds, 3), "samples": len(records),
            "scored": sum(1 for r in records if r.get("score") is not None),
            "judge_requests": judge["requests"], "peak_in_flight": judge["max_in_flight"],
            "peak_queued": judge.get("max_queued", 0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--contexts", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    stub, url = start_stub(args.latency_ms)
    try:
        with tempfile.TemporaryDirectory(prefix="ctxprec-bench-") as tmp:
            events = Path(tmp) / "events.jsonl"
            make_events(events, args.samples, args.contexts)
            runs: list[dict[str, Any]] = []
            for i in range(rounds):
                for adaptive in (True, False):
                    run = score(url, events, adaptive=adaptive, concurrency=args.concurrency)
                    runs.append(run)
                    print(f"round {i + 1} adaptive {'on ' if adaptive else 'off'}: {run['seconds']:.2f}s, "
                          f"peak in flight {run['peak_in_flight']}, scored {run['scored']}/{run['samples']}",
                          flush=True)
            on = statistics.median(r["seconds"] for r in runs if r["adaptive"])
            off = statistics.median(r["seconds"] for r in runs if not r["adaptive"])
            ratio = on / off
            print(f"constant {args.latency_ms:g} ms: adaptive on {on:.2f}s, off {off:.2f}s, ratio {ratio:.3f} "
                  f"(goal <= {GOAL}: {'met' if ratio <= GOAL else 'NOT met'})", flush=True)

            one_slot_events = Path(tmp) / "one-slot.jsonl"
            make_events(one_slot_events, 30, 4, seed=6)
            control(url, slots=1, latency_ms=200.0)
            one_slot = score(url, one_slot_events, adaptive=True, concurrency=16)
            print(f"one slot, 200 ms each: {one_slot['seconds']:.2f}s, peak queued {one_slot['peak_queued']}, "
                  f"scored {one_slot['scored']}/{one_slot['samples']}", flush=True)
    finally:
        stop_process(stub)
    path = write_result("adaptive_concurrency", {
        "benchmark": "adaptive_concurrency",
        "description": f"ctxprec score, {args.samples} samples x {args.contexts} contexts, --concurrency "
                       f"{args.concurrency}, stub judge at {args.latency_ms:g} ms constant latency in its own "
                       f"process, adaptive concurrency on and off in interleaved rounds; then 30 samples "
                       f"against the stub serving one request at a time (200 ms each), adaptive on",
        "quick": args.quick, "rounds": rounds, "runs": runs,
        "adaptive_on_s": round(on, 3), "adaptive_off_s": round(off, 3), "on_over_off": round(ratio, 3),
        "goal_on_over_off": GOAL, "one_slot": one_slot, "machine": machine(),
    }, quick=args.quick)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
