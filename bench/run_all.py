"""`make bench`: run every benchmark in its own process, then write docs/BENCHMARKS.md from the
JSON each one leaves in bench/results/. Each benchmark measures ctxprec and its baseline in the
same run, so the ratios are what to read; absolute rates drift on a shared machine."""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import RESULTS

ROOT = Path(__file__).resolve().parent.parent
_PRINT = threading.Lock()
DOC = ROOT / "docs" / "BENCHMARKS.md"

# Order matters only for reading: scorer first, then the sidecar, then Kafka.
BENCHMARKS = [
    "judge_client_cpu",
    "judge_tokens",
    "cold_start",
    "local_judge",
    "redact",
    "score_throughput",
    "adaptive_concurrency",
    "ingest",
    "huge_trace",
    "log_passthrough",
    "resolver",
    "forward_latency",
    "overload",
    "attacks",
    "diagnostics_overhead",
    "cardinality",
    "sink_overhead",
    "kafka_consume",
    "cluster",
    "drift_detection",
    "kappa_interval",
    "canary_detection",
    "shadow_overhead",
]
# A benchmark whose result file is named otherwise than the benchmark.
RESULT_OF = {"canary_detection": "canary"}


def result_name(name: str) -> str:
    return RESULT_OF.get(name, name)
# Long runs `make bench` leaves out (minutes each); their last results are rendered when present.
LONG_RUNS = {
    "soak": "python -m bench.attacks --soak-s 900",
    "outage_600s": "python -m bench.attacks --outage-only --outage-s 600",
}


def machine() -> str:
    try:
        model = next(
            (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
             if line.startswith("model name")), platform.processor() or "unknown CPU")
    except OSError:
        model = platform.processor() or "unknown CPU"
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores ({model}), {mem_gib:.0f} GiB, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def _get(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


# One headline row per benchmark: (what is compared, ratio key, goal text, goal met key or test).
HEADLINES: dict[str, tuple[str, str, str, Any]] = {
    "judge_client_cpu": ("judge client CPU per call, ctxprec / bare aiohttp POST",
                         "ratios.ctxprec_over_bare", "<= 3", lambda r: r <= 3),
    "judge_tokens": ("prompt tokens per 10-context sample, ctxprec / one call per context (500-char contexts)",
                     "chunks_500_chars.prompt_token_ratio_vs_per_context", "<= 0.5, 1 call", lambda r: r <= 0.5),
    "cold_start": ("cold `ctxprec score` CPU and peak RSS, priced / unpriced model name (200 events)",
                   "ratios.cpu_priced_over_unpriced", "<= 1.5 (RSS too)", "goal_met"),
    "local_judge": ("local judge CPU per judged context, this tree / the baseline ref (cold `ctxprec score` too)",
                    "ratios.cpu_per_context", "<= 2 (cold score <= 1.2)", "goal_met"),
    "score_throughput": ("`ctxprec score` rate / bare aiohttp client, 10,000 events",
                         "ratio_vs_bare", ">= 0.9", lambda r: r >= 0.9),
    "adaptive_concurrency": ("`ctxprec score` seconds with adaptive concurrency / without (200 samples x 10 "
                             "contexts, judge at a constant 100 ms, --concurrency 32)", "on_over_off", "<= 1.15",
                             lambda r: r <= 1.15),
    "cardinality": ("`/metrics` bytes of a whole `ctxprec serve` after one scored retrieval for each of 50 services "
                    "x 50 retrievers", "after.scrape_bytes", "< 2 MB, /diagnostics/top_k < 150 KB", "goal_met"),
    "ingest": ("whole `ctxprec serve` spans per CPU-second (OTLP/HTTP in, span-mode forwarding, 1% judged) / bare "
               "ParseFromString; this tree against the baseline ref is `vs_baseline` below, in-process decode + "
               "ingest is `ratio`", "serve_process_ratio", ">= 0.2", lambda r: r >= 0.2),
    "huge_trace": ("one 20,001-span agent trace (500 retrievals) into `ctxprec serve`: CPU per span at 20k / at 5k "
                   "spans, this tree; the loop's longest stall and the baseline ref's beside it",
                   "after.cpu_per_span_largest_over_smallest", "<= 1.3, stall < 1 s", "goal_met"),
    "log_passthrough": ("whole `ctxprec serve` OTLP log records per CPU-second passed on to --forward-to / bare "
                        "ExportLogsServiceRequest.ParseFromString, an app's own logs (GenAI events at 1% below)",
                        "serve_process_ratio", ">= 0.2 (GenAI events >= 0.095)", "goal_met"),
    "attacks": ("/healthz p99 (ms) under the worst of slowloris, an idle flood, 100,000-span requests and a 200 MB "
                "judge answer, with 1,500 spans/s of load; lost spans in a 60 s forward outage beside it",
                "healthz_p99_ms_worst_attack", "no probe failed, RSS < 2x, nothing lost", "goal_met"),
    "resolver": ("resolution of a sampled retrieval's 10 ids against PostgreSQL, Redis, Chroma, Milvus Lite: "
                 "p95 of the slowest store, cold (one lookup) (ms); cached p95 beside it", "worst_cold_p95_ms",
                 "(no goal)", None),
    "forward_latency": ("added forwarding latency p99 at 5,000 spans/s (ms)", "added.p99_ms", "< 5 ms",
                        lambda r: r < 5),
    "overload": ("scoring rate under 10x overload / judge capacity", "overload_scoring_rate_vs_capacity",
                 "RSS under cap, shed counted, >= 0.8, full rate after", "passed"),
    "kafka_consume": ("Kafka events/s decided at 1% / bare aiokafka loop", "ratio", ">= 0.5", lambda r: r >= 0.5),
    "diagnostics_overhead": ("CPU per score of the DiagnosticsSink inside `ctxprec serve` / CPU per score without it",
                             "added_fraction", "< 0.05", "goal_met"),
    "sink_overhead": ("CPU per score of `ctxprec serve` with `--sink phoenix` / without (real Phoenix)",
                      "ratio", "< 1.10", "goal_met"),
    "redact": ("PII redaction time / one naive regex pass (mixed text)", "mixed.time_ratio_vs_baseline",
               "(no goal)", None),
    "cluster": ("3 replicas vs 1 in one consumer group (real broker): judge-latency-bound scores/s; drift "
                "detection and sample-rate rise, judge calls with the shared cache, 3 / 1",
                "scale_out_ratio", ">= 2.94; delays <= 1.2x; calls <= 1.1x; same top-5; 0 failed with the store "
                "down", "meets_goals"),
    "drift_detection": ("drift detection delay, adaptive sampling from 1% / flat 1% (simulated traffic)",
                        "ratios.adaptive_delay_over_flat_1pct",
                        "<= 0.5, <= 3x flat 10%, <= 1.2x calls, no more false alarms, bands 93-97%", "goal_met"),
    "kappa_interval": ("width of Cohen's kappa's 95% interval at 50 labelled contexts (local judge vs its labelled "
                       "sets, whole retrievals drawn; 200 and 1,000 and coverage below)", "sizes.50.cases.width_mean",
                       "(no goal)", None),
    "canary_detection": ("judge canary: detection of a judge flipping 5% of verdicts (false \"changed\" on an "
                         "unchanged judge, 20% flips beside it; 100 runs, stub judge)", "detection_rate_flip_5pct",
                         "false changed <= 0.02, 20% flips >= 0.95", "goal_met"),
    "shadow_overhead": ("live scoring throughput of `ctxprec serve` with a shadow judge at 10% / without",
                        "ratio_with_over_without", ">= 0.95", "goal_met"),
}


def headline_table(names: list[str], folder: Path = RESULTS) -> list[str]:
    rows = ["| benchmark | compared | ratio | goal | met |", "|---|---|---|---|---|"]
    for name in names:
        path = folder / f"{result_name(name)}.json"
        if name not in HEADLINES or not path.exists():
            continue
        what, key, goal, test = HEADLINES[name]
        data = json.loads(path.read_text())
        value = _get(data, key)
        ok = _get(data, test) if isinstance(test, str) else None if test is None or value is None else test(value)
        met = "" if ok is None else ("yes" if ok else "**no**")
        rows.append(f"| {name} | {what} | {fmt(value)} | {goal} | {met} |")
    return rows + [""]


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        rows: list[tuple[str, Any]] = []
        for key, inner in value.items():
            rows.extend(flatten(inner, f"{prefix}{key}."))
        return [(k.rstrip("."), v) for k, v in rows]
    return [(prefix, value)]


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, list):
        return ", ".join(fmt(v) for v in value[:12]) + (" ..." if len(value) > 12 else "")
    return str(value)


def render(names: list[str], runs: dict[str, dict[str, Any]]) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = ["# Benchmarks", "",
           "Generated by `make bench` (`python -m bench.run_all`). Every benchmark measures ctxprec and "
           "its baseline in the same run on the same machine and reports the ratio; read the ratios, "
           "not the absolute rates (the machine is shared and noisy).", "",
           f"Machine: {machine()}.", "",
           (f"Run: {stamp}." if runs else f"Rendered: {stamp}, from the results of the last run."), "",
           "## Summary", ""] + headline_table(names) + ["Every figure of every run follows.", ""]
    for name in names:
        path = RESULTS / f"{result_name(name)}.json"
        out.append(f"## {name}")
        out.append("")
        status = runs.get(name, {})
        if status.get("returncode") not in (0, None):
            out.append(f"The benchmark exited with status {status['returncode']}: "
                       f"`{status.get('tail', '').strip()[-300:]}`")
            out.append("")
        if not path.exists():
            out.append("No result file was written.")
            out.append("")
            continue
        data = json.loads(path.read_text())
        if name in LONG_RUNS:
            out.append(f"A long run, not part of `make bench`: `{LONG_RUNS[name]}`.")
            out.append("")
        for key in ("description", "title", "goal"):
            if isinstance(data.get(key), str):
                out.append(f"*{key}*: {data[key]}")
                out.append("")
        if isinstance(data.get("table"), list):  # a benchmark's own summary table, in markdown
            out.extend(str(line) for line in data["table"])
            out.append("")
        out.append("| figure | value |")
        out.append("|---|---|")
        for key, value in flatten(data):
            if key in ("description", "title", "goal", "table") or key.startswith("machine"):
                continue
            out.append(f"| {key} | {fmt(value)} |")
        out.append("")
    return "\n".join(out) + "\n"


def run_one(name: str, flags: list[str], folder: Path, count: int) -> dict[str, Any]:
    """Runs one benchmark in its own process; its output is printed when it ends."""
    cmd = [sys.executable, "-m", f"bench.{name}", *flags]
    started, began = time.monotonic(), time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    result = folder / f"{result_name(name)}.json"
    reported = result.exists() and result.stat().st_mtime >= began
    with _PRINT:
        print(f"[{BENCHMARKS.index(name) + 1 if name in BENCHMARKS else '-'}/{count}] {' '.join(cmd[1:])}")
        sys.stdout.write(proc.stdout)
        print(f"    exit {proc.returncode} after {time.monotonic() - started:.0f} s"
              + ("" if reported else f"; no result written to {result.relative_to(ROOT)}"), flush=True)
        if proc.returncode:
            sys.stderr.write(proc.stderr[-2000:])
    return {"returncode": proc.returncode, "tail": proc.stderr[-2000:], "reported": reported}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="pass --quick to every benchmark: a check that each runs and reports (results in "
                             "bench/results/quick/, docs/BENCHMARKS.md left as it is)")
    parser.add_argument("--only", nargs="*", help="run only these benchmarks")
    parser.add_argument("--skip", nargs="*", default=[], help="leave these benchmarks out")
    parser.add_argument("--render-only", action="store_true", help="rewrite docs/BENCHMARKS.md from existing results")
    parser.add_argument("--jobs", type=int, default=1,
                        help="benchmarks run side by side (a --quick check only: side by side they measure each "
                             "other)")
    args = parser.parse_args(argv)
    if args.jobs > 1 and not args.quick:
        parser.error("--jobs: benchmarks side by side disturb each other's figures; only with --quick")
    names = [n for n in (args.only or BENCHMARKS) if n not in args.skip]
    folder = RESULTS / "quick" if args.quick else RESULTS
    runs: dict[str, dict[str, Any]] = {}
    if not args.render_only:
        flags = ["--quick"] if args.quick else []
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            runs = dict(zip(names, pool.map(lambda name: run_one(name, flags, folder, len(names)), names)))
    failed = [name for name, run in runs.items() if run["returncode"] or not run["reported"]]
    if args.quick:
        print("\n".join(headline_table(names, folder)))
    else:
        DOC.parent.mkdir(exist_ok=True)
        long_runs = [name for name in LONG_RUNS if (RESULTS / f"{name}.json").exists()]
        DOC.write_text(render(names + long_runs, runs))
        print(f"wrote {DOC.relative_to(ROOT)}")
    if failed:
        print(f"failed or reported nothing: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
