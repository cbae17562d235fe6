"""One benchmark on the code of a git ref and on this tree, in the same session, rounds interleaved
(before, after, before, after, ...): the figure an issue promises to keep ("at least 0.9x of its
figure before") measured as a ratio of two runs on the same machine at the same time.

    .venv/bin/python -m bench.before_after ingest --ref 9c1b282 --key serve_process_ratio -- --no-baseline
    .venv/bin/python -m bench.before_after score_throughput --ref 9c1b282 --key ratio_vs_bare

The benchmark runs as it always does (its own process, this tree's bench/ code and virtual
environment); only the `ctxprec` package it drives is the ref's (bench.common.baseline_code). Its
result file is put back as it was after every run, so the committed figures stay those of `make
bench`; the pairs go to bench/results/<benchmark>_before_after.json, or `--name`."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, baseline_code, env_for, machine, write_result


def figure(data: dict[str, Any], key: str) -> float:
    for part in key.split("."):
        data = data[part]
    return float(data)  # type: ignore[arg-type]


def run(benchmark: str, args: list[str], key: str, pythonpath: Path | None, quick: bool) -> float:
    result = (RESULTS / "quick" if quick else RESULTS) / f"{benchmark}.json"
    kept = result.read_bytes() if result.exists() else None
    try:
        proc = subprocess.run([sys.executable, "-m", f"bench.{benchmark}", *(["--quick"] if quick else []), *args],
                              cwd=ROOT, env=env_for(pythonpath), capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"bench.{benchmark} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return figure(json.loads(result.read_text()), key)
    finally:
        if kept is None:
            result.unlink(missing_ok=True)
        else:
            result.write_bytes(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark", help="a module of bench/, e.g. ingest")
    parser.add_argument("--ref", required=True, help="git ref whose code is 'before'")
    parser.add_argument("--key", required=True, help="the figure to compare, a dotted key of the result JSON")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="pass --quick to the benchmark")
    parser.add_argument("--name", help="the result's name in bench/results/ (default <benchmark>_before_after)")
    args, extra = parser.parse_known_args(argv)
    # After `--`: the benchmark's own arguments.
    args.args = extra[1:] if extra[:1] == ["--"] else extra
    pairs: list[dict[str, float]] = []
    with baseline_code(args.ref) as (commit, path):
        for i in range(args.rounds):
            before = run(args.benchmark, args.args, args.key, path, args.quick)
            after = run(args.benchmark, args.args, args.key, None, args.quick)
            pairs.append({"before": before, "after": after, "after_over_before": round(after / before, 3)})
            print(f"round {i + 1}: {args.key} before {before:.4g}, after {after:.4g}, "
                  f"ratio {after / before:.3f}", flush=True)
    ratio = statistics.median(p["after_over_before"] for p in pairs)
    print(f"median after / before: {ratio:.3f}")
    name = args.name or f"{args.benchmark}_before_after"
    write_result(name, {
        "benchmark": name,
        "description": f"bench/{args.benchmark}.py on the code of {args.ref} ({commit[:10]}) and on this tree, "
                       f"{args.rounds} interleaved rounds in one session; each figure is the benchmark's "
                       f"`{args.key}`, compared pair by pair",
        "machine": machine(), "baseline_ref": args.ref, "baseline_commit": commit, "key": args.key,
        "quick": args.quick, "pairs": pairs, "after_over_before": ratio,
    }, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
