"""Cold start of `ctxprec score`: a priced model name against an unpriced one.

In one run: the stub judge in its own process (0 ms latency); then, for several interleaved
rounds, a fresh `ctxprec score` process on the same 200 events over the direct OpenAI-compatible
path, once with a model name that litellm's cost map prices (`openai/gpt-4o-mini`) and once with
one it does not (`openai/ctxprec-stub-judge`). Each child's whole-process CPU (user + sys) and peak
RSS come from `os.wait4`, so the stub's own work is not counted. The only difference between the
two runs is the price look-up; goal: the priced run within 1.5x of the unpriced one in both.

    .venv/bin/python -m bench.cold_start            # 5 rounds
    .venv/bin/python -m bench.cold_start --quick    # 2 rounds
"""
from __future__ import annotations

from bench.common import machine, write_result

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CTXPREC = Path(sys.executable).with_name("ctxprec")
PRICED = "openai/gpt-4o-mini"
UNPRICED = "openai/ctxprec-stub-judge"
EVENTS = 200
GOAL = 1.5


@dataclass
class Run:
    model: str
    cpu_s: float  # user + sys of the whole `ctxprec score` process
    peak_rss_mb: float
    wall_s: float
    exit_status: int


def start_stub() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", "0", "--latency-ms", "0"],
        stdout=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("stub judge listening on "):
        proc.kill()
        raise SystemExit(f"stub judge did not start: {line!r}")
    return proc, line.split()[-1]


def make_events(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            event = {
                "trace_id": f"{i:032x}", "span_id": f"{i:016x}", "service": "bench",
                "query": f"How do I reset the password of account {i}?",
                "output": "Open Settings, choose Security and click Reset password.",
                "contexts": ["Open Settings and choose Security to reset a password.",
                             "Our offices close on public holidays.",
                             f"Account {i} was created last year."],
            }
            out.write(json.dumps(event) + "\n")


def score_once(model: str, url: str, events: Path, out: Path) -> Run:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPREC_")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", OPENAI_API_KEY="bench-key")
    cmd = [str(CTXPREC), "score", str(events), "-o", str(out), "--judge-model", model, "--judge-api-base", url]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux.
    return Run(model, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, wall, proc.returncode)


def summarise(runs: list[Run]) -> dict[str, Any]:
    return {
        "rounds": len(runs),
        "cpu_s": [round(r.cpu_s, 3) for r in runs],
        "peak_rss_mb": [round(r.peak_rss_mb, 1) for r in runs],
        "median_cpu_s": statistics.median(r.cpu_s for r in runs),
        "median_peak_rss_mb": statistics.median(r.peak_rss_mb for r in runs),
        "median_wall_s": statistics.median(r.wall_s for r in runs),
        "failed_runs": sum(r.exit_status != 0 for r in runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 5)
    stub, url = start_stub()
    runs: dict[str, list[Run]] = {PRICED: [], UNPRICED: []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            events = Path(tmp) / "events.jsonl"
            make_events(events, EVENTS)
            score_once(UNPRICED, url, events, Path(tmp) / "warm.jsonl")  # page cache warm for both
            for _ in range(rounds):  # interleaved, so drift in machine load hits both alike
                for model in (PRICED, UNPRICED):
                    runs[model].append(score_once(model, url, events, Path(tmp) / "scores.jsonl"))
    finally:
        stub.terminate()
        stub.wait(timeout=10)
    priced, unpriced = summarise(runs[PRICED]), summarise(runs[UNPRICED])
    cpu_ratio = priced["median_cpu_s"] / unpriced["median_cpu_s"]
    rss_ratio = priced["median_peak_rss_mb"] / unpriced["median_peak_rss_mb"]
    result = {
        "benchmark": "cold_start",
        "description": f"cold `ctxprec score` of {EVENTS} events against the stub judge: priced model name "
                       f"({PRICED}) vs unpriced ({UNPRICED}); child CPU and peak RSS from os.wait4",
        "machine": machine(),
        "quick": args.quick,
        "events": EVENTS,
        "priced": priced,
        "unpriced": unpriced,
        "ratios": {"cpu_priced_over_unpriced": cpu_ratio, "peak_rss_priced_over_unpriced": rss_ratio},
        "goal": f"both ratios <= {GOAL}",
        "goal_met": cpu_ratio <= GOAL and rss_ratio <= GOAL and not priced["failed_runs"] + unpriced["failed_runs"],
        "runs": [asdict(r) for model_runs in runs.values() for r in model_runs],
    }
    path = write_result("cold_start", result, quick=args.quick)
    print(json.dumps({"ratios": result["ratios"], "priced": {k: priced[k] for k in ("median_cpu_s", "median_peak_rss_mb")},
                      "unpriced": {k: unpriced[k] for k in ("median_cpu_s", "median_peak_rss_mb")},
                      "goal_met": result["goal_met"]}, indent=2))
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
