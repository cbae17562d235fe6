"""The judge canary's error rates: how often it says an unchanged judge changed, and how often it
notices a judge that turns 5% or 20% of its verdicts around.

In process, over real HTTP: the stub judge (`flip_rate`: a changed judge, the same contexts
answered the other way every time; `noise_rate`: run-to-run variation, any verdict turned around
at random on each answer) and the canary as the sidecar runs it (collector/canary/runner.py: the
judge client without a verdict cache, the shipped canary set of 30 samples x 5 contexts, the
default false alarm rate 0.001). Each run takes a fresh baseline (the set judged twice), then
judges the set once more three times: unchanged (a "changed" is a false alarm), then with 5% and
with 20% of the contexts flipped (each run flips other contexts: `flip_salt` is the run's). Two
judges: one that never varies (temperature 0 on a deterministic server), one that turns 2% of
its verdicts around at random on every answer.

    .venv/bin/python -m bench.canary_detection [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import time
from typing import Any

from bench.common import machine, write_result
from ctxprec.collector.canary.runner import JudgeCanary
from ctxprec.collector.canary.samples import load_canary
from ctxprec.collector.canary.watch import JudgeWatch
from ctxprec.collector.stub_judge import StubJudge, StubSettings
from ctxprec.scorer.config import JudgeConfig

FLIPS = (0.05, 0.20)
NOISE = (0.0, 0.02)
FALSE_ALARM_RATE = 0.001


async def measure(noise: float, runs: int) -> dict[str, Any]:
    stub = StubJudge(StubSettings(noise_rate=noise, seed=11))
    await stub.start()
    samples = load_canary(None)
    live = JudgeConfig(model="openai/stub", api_base=stub.url, api_key="k", concurrency=8)
    watch = JudgeWatch(None, window_s=3600)
    canary = JudgeCanary.build(samples, live, scale=1.0, observer=lambda event: None, watch=watch, interval_s=3600,
                               false_alarm_rate=FALSE_ALARM_RATE)
    false_changed = 0
    detected = dict.fromkeys(FLIPS, 0)
    allowed: list[int] = []
    disagreements: list[int] = []
    requests_before = stub.stats.requests
    started = time.perf_counter()
    try:
        for run in range(runs):
            stub.configure(flip_rate=0.0)
            canary.baseline = None
            await canary._take_baseline()
            assert canary.baseline is not None
            allowed.append(canary.baseline.allowed)
            disagreements.append(canary.baseline.disagreements)
            result = await canary.round()
            assert result is not None
            false_changed += result.changed
            for flip in FLIPS:
                stub.configure(flip_rate=flip, flip_salt=f"run-{run}")
                result = await canary.round()
                assert result is not None
                detected[flip] += result.changed
    finally:
        await canary.close()
        await stub.stop()
    contexts = sum(len(s.contexts) for s in samples)
    return {
        "noise_rate": noise,
        "runs": runs,
        "false_changed_rate": false_changed / runs,
        **{f"detection_rate_flip_{round(flip * 100)}pct": detected[flip] / runs for flip in FLIPS},
        "canary_contexts": contexts,
        "baseline_disagreements_mean": sum(disagreements) / runs,
        "allowed_moves_min": min(allowed),
        "allowed_moves_max": max(allowed),
        "judge_requests": stub.stats.requests - requests_before,
        "seconds": round(time.perf_counter() - started, 2),
    }


async def main_async(runs: int) -> dict[str, Any]:
    judges = {f"noise_{round(noise * 100)}pct": await measure(noise, runs) for noise in NOISE}
    steady = judges["noise_0pct"]
    return {
        "benchmark": "canary_detection",
        "machine": machine(),
        "false_alarm_rate_setting": FALSE_ALARM_RATE,
        "judges": judges,
        # The headline: the deterministic judge's 5% detection; the noisy judge's beside it.
        "false_changed_rate": max(j["false_changed_rate"] for j in judges.values()),
        "detection_rate_flip_5pct": steady["detection_rate_flip_5pct"],
        "detection_rate_flip_20pct": min(j["detection_rate_flip_20pct"] for j in judges.values()),
        "goal_met": all(j["false_changed_rate"] <= 0.02 and j["detection_rate_flip_20pct"] >= 0.95
                        for j in judges.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10 runs instead of 100")
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args()
    logging.getLogger("ctxprec.judge").setLevel(logging.ERROR)  # one "judge changed" line per detection
    runs = args.runs or (10 if args.quick else 100)
    result = asyncio.run(main_async(runs))
    path = write_result("canary", result, quick=args.quick)
    print(f"wrote {path}")
    for name, judge in result["judges"].items():
        print(name, {k: v for k, v in judge.items() if "rate" in k})


if __name__ == "__main__":
    main()
