"""Throughput and memory of `ctxprec score` against a judge with 100 ms latency.

In one run: the stub judge in its own process (`--latency-ms 100`); a bare aiohttp client posting
the same number of chat requests at concurrency 32 to it (the baseline: what the judge allows);
then `ctxprec score` in its own process at `--concurrency 32` on 1,000 and 10,000 events, its peak
RSS sampled with psutil. The ideal is 32 / 0.1 s = 320 events/s; the goal is >= 90% of the bare
client's rate.

    .venv/bin/python -m bench.score_throughput            # 1,000 and 10,000 events
    .venv/bin/python -m bench.score_throughput --quick    # 300 and 2,000 events
"""
from __future__ import annotations

from bench.common import write_result

import argparse
import asyncio
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent
CTXPREC = Path(sys.executable).with_name("ctxprec")

WORDS = (
    "password reset account settings billing invoice refund shipping order tracking warranty "
    "battery charger screen display network router firmware update install license subscription "
    "cancel upgrade storage backup restore sync calendar contacts email notification privacy"
).split()


@dataclass
class Run:
    name: str
    events: int
    seconds: float
    rate: float
    errors: int
    peak_rss_mb: float | None = None
    steady_rate: float | None = None  # ctxprec's own figure, startup excluded


def make_events(path: Path, count: int, seed: int = 11) -> None:
    import random

    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            query = " ".join(rng.sample(WORDS, 4))
            contexts = [" ".join(rng.choice(WORDS) for _ in range(40)) for _ in range(4)]
            event = {
                "trace_id": f"{i:032x}",
                "span_id": f"{i:016x}",
                "service": f"svc-{i % 3}",
                "query": query,
                "contexts": contexts,
                "output": " ".join(rng.sample(WORDS, 12)),
                "attributes": {"retriever": "kb-v2"},
            }
            out.write(json.dumps(event) + "\n")


def baseline_body(i: int) -> dict[str, Any]:
    """A chat request of the same shape and size as the judge's (four contexts in the data block)."""
    data = {
        "task": "verdicts",
        "query": f"question {i} about password reset",
        "reference_kind": "output",
        "reference": "open settings and reset the password " * 3,
        "contexts": [{"context_index": j, "text": " ".join(WORDS[(i + j + n) % len(WORDS)] for n in range(40))} for j in range(4)],
    }
    user = "Judge each context.\nBEGIN_DATA\n" + json.dumps(data) + "\nEND_DATA"
    return {
        "model": "stub",
        "temperature": 0,
        "response_format": {"type": "json_object"},
        "messages": [{"role": "system", "content": "You judge retrieved context relevance. " * 20}, {"role": "user", "content": user}],
    }


async def bare_client(url: str, count: int, concurrency: int) -> Run:
    errors = 0
    next_index = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal errors, next_index
            while next_index < count:
                i = next_index
                next_index += 1
                async with session.post(url + "/chat/completions", json=baseline_body(i)) as response:
                    payload = await response.json()
                    if response.status != 200 or "choices" not in payload:
                        errors += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return Run("bare aiohttp client", count, seconds, count / seconds, errors)


def run_ctxprec(url: str, events: Path, count: int, concurrency: int) -> Run:
    out = events.with_suffix(".scores.jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPREC_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    cmd = [
        str(CTXPREC), "score", str(events), "-o", str(out),
        "--judge-model", "openai/stub", "--judge-api-base", url, "--concurrency", str(concurrency),
    ]
    started = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            try:
                peak = max(peak, proc.memory_info().rss)
            except psutil.Error:
                return
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate(timeout=900)
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    stderr = err.decode(errors="replace")
    if proc.returncode not in (0, 1):
        raise SystemExit(f"ctxprec score failed ({proc.returncode}):\n{stderr}")
    records = errors = 0
    with out.open(encoding="utf-8") as handle:
        for line in handle:
            records += 1
            if json.loads(line)["error"] is not None:
                errors += 1
    if records != count:
        raise SystemExit(f"ctxprec wrote {records} records for {count} events:\n{stderr}")
    steady = re.search(r"\(([\d.]+) events/s\)", stderr)
    return Run(
        f"ctxprec score ({count} events)",
        count,
        seconds,
        count / seconds,
        errors,
        peak_rss_mb=peak / 2**20,
        steady_rate=float(steady.group(1)) if steady else None,
    )


def start_stub(latency_ms: float) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", "0", "--latency-ms", str(latency_ms)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    line = proc.stdout.readline().decode() if proc.stdout else ""
    match = re.search(r"(http://\S+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"the stub judge did not start: {line!r} {proc.stderr.read().decode() if proc.stderr else ''}")
    return proc, match.group(1)


def stub_stats(url: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=10) as response:
        return json.loads(response.read())


def machine() -> dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 and 2,000 events instead of 1,000 and 10,000")
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    small, large = (300, 2000) if args.quick else (1000, 10_000)
    ideal = args.concurrency / (args.latency_ms / 1000.0)

    stub, url = start_stub(args.latency_ms)
    try:
        with tempfile.TemporaryDirectory(prefix="ctxprec-bench-") as tmp:
            runs: list[Run] = []
            baseline = asyncio.run(bare_client(url, large, args.concurrency))
            runs.append(baseline)
            print(f"{baseline.name:<32} {large:>6} requests  {baseline.seconds:6.1f}s  {baseline.rate:6.1f}/s")
            for count in (small, large):
                events = Path(tmp) / f"events-{count}.jsonl"
                make_events(events, count)
                before = stub_stats(url)["requests"]
                result = run_ctxprec(url, events, count, args.concurrency)
                judged = stub_stats(url)["requests"] - before
                runs.append(result)
                print(
                    f"{result.name:<32} {count:>6} events    {result.seconds:6.1f}s  {result.rate:6.1f}/s"
                    f"  (steady {result.steady_rate or 0:.1f}/s)  peak RSS {result.peak_rss_mb:.0f} MB"
                    f"  judge requests {judged}  errors {result.errors}"
                )
    finally:
        stub.terminate()
        try:
            stub.wait(timeout=10)
        except subprocess.TimeoutExpired:
            stub.kill()

    big = runs[-1]
    ratio = big.rate / baseline.rate
    steady_ratio = (big.steady_rate or 0) / baseline.rate
    print(
        f"ideal {ideal:.0f}/s; ctxprec/bare at {large} events: {ratio:.1%} wall-clock (startup included), "
        f"{steady_ratio:.1%} steady; goal >= 90%: {'met' if ratio >= 0.9 else 'NOT met'}"
    )
    result = {
        "benchmark": "score_throughput",
        "quick": args.quick,
        "latency_ms": args.latency_ms,
        "concurrency": args.concurrency,
        "ideal_rate": ideal,
        "runs": [asdict(r) for r in runs],
        "ratio_vs_bare": round(ratio, 4),
        "steady_ratio_vs_bare": round(steady_ratio, 4),
        "goal_ratio": 0.9,
        "peak_rss_mb": {str(r.events): round(r.peak_rss_mb or 0, 1) for r in runs if r.peak_rss_mb is not None},
        "machine": machine(),
    }
    path = write_result("score_throughput", result, quick=args.quick)
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
