"""The local judge's cost: CPU per judged context, and a cold `ctxprec score` with `--judge-model local`.

Both are measured for this tree's code and for a baseline, in the same run, interleaved round by
round so that drift in the shared machine's load hits both alike. The baseline is the code of a
git ref (default `main`), checked out into a scratch worktree that is removed afterwards; each
child process imports it through PYTHONPATH (ahead of the editable install), so both sides run in
the same virtual environment on the same inputs.

- *CPU per context*: a child process loads every labelled case of this tree
  (scorer/judge/local_cases*.jsonl, read as files, so both sides judge the same cases), judges
  them once to warm up (lazy loading of word data and analyzers is reported apart, as
  `first_pass_cpu_s`), then judges them again until a second of CPU has gone, and reports
  process CPU (time.process_time) per judged context, overall and per language.
- *cold `ctxprec score`*: a fresh `ctxprec score EVENTS --judge-model local` process on one event
  per labelled case (the question, the answer as output, its contexts): whole-process CPU
  (user + sys from os.wait4), wall time and peak RSS. Two inputs: the English cases alone, and
  every case in every language (which loads every language's analyzer).

Goals: CPU per context at most 2x the baseline's; cold `ctxprec score` within 1.2x.

    .venv/bin/python -m bench.local_judge              # 5 rounds against main
    .venv/bin/python -m bench.local_judge --quick      # 2 rounds
    .venv/bin/python -m bench.local_judge --baseline-ref 40ea3d3
"""
from __future__ import annotations

from bench.common import baseline_code, env_for, machine, write_result

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "scorer" / "judge"
CTXPREC = Path(sys.executable).with_name("ctxprec")
CPU_GOAL = 2.0
COLD_GOAL = 1.2
MIN_TIMED_CPU_S = 1.0


def load_cases() -> list[dict[str, Any]]:
    cases = []
    for path in sorted(DATA.glob("local_cases*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                case = json.loads(line)
                case.setdefault("language", "en")
                cases.append(case)
    return cases


# -- the child: CPU per judged context, in whichever ctxprec PYTHONPATH gives it ----------------

def child_cpu(cases_path: Path) -> dict[str, Any]:
    from ctxprec.scorer.judge.local import LocalJudge

    cases = [json.loads(line) for line in cases_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    judge = LocalJudge()

    def one_pass(per_language: dict[str, list[float]] | None = None) -> None:
        for case in cases:
            started = time.process_time()
            judge.judge_sync(case["question"], case["contexts"], reference_kind="output", reference=case["answer"])
            if per_language is not None:
                spent = per_language.setdefault(case["language"], [0.0, 0])
                spent[0] += time.process_time() - started
                spent[1] += len(case["contexts"])

    started = time.process_time()
    one_pass()
    first = time.process_time() - started
    per_language: dict[str, list[float]] = {}
    passes = 0
    started = time.process_time()
    while passes == 0 or time.process_time() - started < MIN_TIMED_CPU_S:
        one_pass(per_language)
        passes += 1
    spent = time.process_time() - started
    contexts = sum(len(case["contexts"]) for case in cases)
    import ctxprec.scorer.judge.local as module

    return {
        "module": module.__file__,
        "prompt_version": module.LOCAL_PROMPT_VERSION,
        "contexts": contexts,
        "passes": passes,
        "first_pass_cpu_s": first,
        "cpu_us_per_context": spent / (passes * contexts) * 1e6,
        "cpu_us_per_context_by_language": {
            language: cpu / count * 1e6 for language, (cpu, count) in sorted(per_language.items())
        },
    }


# -- the parent -------------------------------------------------------------------------------

def run_cpu_child(cases_path: Path, pythonpath: Path | None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.local_judge", "--child-cpu", str(cases_path)],
        cwd=ROOT, env=env_for(pythonpath), capture_output=True, text=True, check=False,
    )
    if proc.returncode:
        raise SystemExit(f"the CPU child failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_events(path: Path, cases: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i, case in enumerate(cases):
            event = {"trace_id": f"{i:032x}", "span_id": f"{i:016x}", "service": "bench",
                     "query": case["question"], "output": case["answer"], "contexts": case["contexts"]}
            out.write(json.dumps(event, ensure_ascii=False) + "\n")


def cold_score(events: Path, out: Path, pythonpath: Path | None) -> dict[str, Any]:
    cmd = [str(CTXPREC), "score", str(events), "-o", str(out), "--judge-model", "local"]
    log = out.with_suffix(".stderr")
    with log.open("wb") as stderr:  # a file, not a pipe: nothing can block while we wait
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env_for(pythonpath), stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise SystemExit(f"`ctxprec score` exited {code}: {log.read_text(errors='replace')[-2000:]}")
    records = sum(1 for _ in out.open(encoding="utf-8"))
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024.0,
            "records": records}


def median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--baseline-ref", default="main", help="git ref whose code is the baseline (default main)")
    parser.add_argument("--child-cpu", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_cpu:
        print(json.dumps(child_cpu(args.child_cpu)))
        return 0
    rounds = args.rounds or (2 if args.quick else 5)
    cases = load_cases()
    english = [case for case in cases if case["language"] == "en"]
    sides = ("baseline", "ctxprec")
    cpu: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    cold: dict[str, dict[str, list[dict[str, Any]]]] = {w: {side: [] for side in sides} for w in ("english", "all")}
    with tempfile.TemporaryDirectory(prefix="ctxprec-bench-local-") as tmp, \
            baseline_code(args.baseline_ref) as (commit, baseline_path):
        scratch = Path(tmp)
        paths = {"baseline": baseline_path, "ctxprec": None}
        cases_path = scratch / "cases.jsonl"
        cases_path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases), encoding="utf-8")
        events = {"english": scratch / "events-en.jsonl", "all": scratch / "events-all.jsonl"}
        write_events(events["english"], english)
        write_events(events["all"], cases)
        for side in sides:  # page cache and byte-code caches warm for both
            cold_score(events["all"], scratch / "warm.jsonl", paths[side])
        for number in range(rounds):
            order = sides if number % 2 == 0 else sides[::-1]
            for side in order:
                cpu[side].append(run_cpu_child(cases_path, paths[side]))
                for workload, path in events.items():
                    cold[workload][side].append(cold_score(path, scratch / "scores.jsonl", paths[side]))
            print(f"round {number + 1}/{rounds}: " + ", ".join(
                f"{side} {cpu[side][-1]['cpu_us_per_context']:.0f} us/context" for side in sides), flush=True)
    summary: dict[str, Any] = {}
    for side in sides:
        runs = cpu[side]
        languages = sorted(runs[0]["cpu_us_per_context_by_language"])
        summary[side] = {
            "prompt_version": runs[0]["prompt_version"],
            "cpu_us_per_context": median(runs, "cpu_us_per_context"),
            "cpu_us_per_context_rounds": [round(r["cpu_us_per_context"], 1) for r in runs],
            "cpu_us_per_context_by_language": {
                lang: round(statistics.median(r["cpu_us_per_context_by_language"][lang] for r in runs), 1)
                for lang in languages},
            "first_pass_cpu_s": round(median(runs, "first_pass_cpu_s"), 3),
            "cold_score": {workload: {
                "median_cpu_s": round(median(cold[workload][side], "cpu_s"), 3),
                "median_wall_s": round(median(cold[workload][side], "wall_s"), 3),
                "median_peak_rss_mb": round(median(cold[workload][side], "peak_rss_mb"), 1),
                "cpu_s_rounds": [round(r["cpu_s"], 3) for r in cold[workload][side]],
            } for workload in cold},
        }
    base, ours = summary["baseline"], summary["ctxprec"]
    ratios = {"cpu_per_context": ours["cpu_us_per_context"] / base["cpu_us_per_context"]}
    for workload in cold:
        for key in ("median_cpu_s", "median_wall_s", "median_peak_rss_mb"):
            ratios[f"cold_{workload}_{key.removeprefix('median_')}"] = (
                ours["cold_score"][workload][key] / base["cold_score"][workload][key])
    goal_met = ratios["cpu_per_context"] <= CPU_GOAL and all(
        ratios[f"cold_{workload}_{key}"] <= COLD_GOAL for workload in cold for key in ("cpu_s", "wall_s"))
    contexts = cpu["ctxprec"][0]["contexts"]
    result = {
        "benchmark": "local_judge",
        "description": (f"local judge CPU per judged context ({contexts} labelled contexts, {len(cases)} cases) and cold "
                        f"`ctxprec score --judge-model local` ({len(english)} English events; {len(cases)} events in "
                        f"every language), this tree against {args.baseline_ref} ({commit[:10]}), interleaved"),
        "machine": machine(),
        "quick": args.quick,
        "rounds": rounds,
        "baseline_ref": args.baseline_ref,
        "baseline_commit": commit,
        "cases": len(cases),
        "contexts": contexts,
        "english_events": len(english),
        "baseline": base,
        "ctxprec": ours,
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "goal": f"CPU per context <= {CPU_GOAL}x the baseline's; cold `ctxprec score` CPU and wall <= {COLD_GOAL}x",
        "goal_met": goal_met,
    }
    path = write_result("local_judge", result, quick=args.quick)
    print(json.dumps({"ratios": result["ratios"], "baseline_us_per_context": round(base["cpu_us_per_context"], 1),
                      "ctxprec_us_per_context": round(ours["cpu_us_per_context"], 1), "goal_met": goal_met}, indent=2))
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
