"""CPU per judge call: ctxprec's LimitedChatClient (direct path) vs litellm.acompletion vs a bare
aiohttp POST of the same request, all against the stub judge running in its own process (0 ms
latency) at concurrency 64. Only this process's CPU (time.process_time) is counted, so the stub's
work is excluded. Goal: ctxprec within 3x of bare.

Also measures what the stub judge sustains at 100 ms latency (requests/s through bare aiohttp).

    .venv/bin/python -m bench.judge_client_cpu [--quick] [--calls N] [--profile]
"""
from __future__ import annotations

from bench.common import write_result

import argparse
import asyncio
import cProfile
import io
import json
import os
import platform
import pstats
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
MODEL = "openai/ctxprec-stub-judge"
CONCURRENCY = 64
API_KEY = "bench-key"


def sample_messages() -> list[dict[str, str]]:
    contexts = [
        "To reset your password, open Settings and choose Security.",
        "Our cafeteria serves lunch from noon until two.",
        "Password rules: at least twelve characters, one digit.",
        "The quarterly report is due on Friday.",
        "Two-factor codes are sent by SMS after a password reset.",
    ]
    data = {
        "task": "verdicts",
        "query": "How do I reset my password?",
        "reference_kind": "output",
        "reference": "Open Settings, then Security, then Reset password.",
        "contexts": [{"context_index": i, "text": t} for i, t in enumerate(contexts)],
    }
    user = "Judge whether each context is useful for the reference.\nBEGIN_DATA\n" + json.dumps(data) + "\nEND_DATA"
    return [{"role": "system", "content": "You are a strict relevance judge. Answer JSON only."},
            {"role": "user", "content": user}]


def start_stub(latency_ms: float) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", "0", "--latency-ms", str(latency_ms)],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("stub judge listening on "):
        proc.kill()
        raise SystemExit(f"stub judge did not start: {line!r}")
    return proc, line.split()[-1]


async def drive(call: Callable[[], Awaitable[Any]], n: int, concurrency: int) -> tuple[float, float]:
    """Run n calls with `concurrency` workers; returns (cpu seconds, wall seconds) of this process."""
    remaining = n

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.process_time() - cpu0, time.perf_counter() - wall0


async def measure(url: str, calls: int, litellm_calls: int, rounds: int, profile: bool) -> dict[str, Any]:
    from ctxprec.scorer.config import JudgeConfig
    from ctxprec.scorer.judge.chat import ChatMessage
    from ctxprec.scorer.judge.factory import make_chat_client
    from ctxprec.scorer.judge.transport_litellm import import_litellm

    raw_messages = sample_messages()
    chat_messages = [ChatMessage(m["role"], m["content"]) for m in raw_messages]
    body = {"model": MODEL.split("/", 1)[1], "messages": raw_messages, "temperature": 0.0,
            "response_format": {"type": "json_object"}}
    headers = {"Authorization": f"Bearer {API_KEY}"}

    session = aiohttp.ClientSession()

    async def bare() -> None:
        async with session.post(url + "/chat/completions", json=body, headers=headers) as response:
            payload = await response.json()
        if not payload["choices"][0]["message"]["content"]:
            raise RuntimeError("empty answer")

    client = make_chat_client(JudgeConfig(model=MODEL, api_base=url, api_key=API_KEY, concurrency=CONCURRENCY))

    async def ctxprec() -> None:
        await client.complete(chat_messages)

    litellm = import_litellm()

    async def via_litellm() -> None:
        response = await litellm.acompletion(
            model=MODEL, messages=raw_messages, api_base=url, api_key=API_KEY, temperature=0.0,
            response_format={"type": "json_object"}, num_retries=0, max_retries=0,
        )
        if not response.choices[0].message.content:
            raise RuntimeError("empty answer")

    paths = {"bare_aiohttp": (bare, calls), "ctxprec": (ctxprec, calls), "litellm": (via_litellm, litellm_calls)}
    for call, _ in paths.values():  # warm up: pools, imports, litellm's caches, the cost lookup
        await drive(call, 2 * CONCURRENCY, CONCURRENCY)

    totals = {name: [0.0, 0.0, 0] for name in paths}
    for _ in range(rounds):  # interleaved rounds, so drift in machine load hits every path alike
        for name, (call, n) in paths.items():
            cpu, wall = await drive(call, n // rounds, CONCURRENCY)
            totals[name][0] += cpu
            totals[name][1] += wall
            totals[name][2] += n // rounds

    profile_text = None
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        await drive(ctxprec, calls // rounds, CONCURRENCY)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        profile_text = out.getvalue()

    await client.aclose()
    await session.close()
    figures = {
        name: {"calls": n, "cpu_ms_per_call": 1000.0 * cpu / n, "wall_s": wall, "calls_per_s": n / wall}
        for name, (cpu, wall, n) in totals.items()
    }
    return {"paths": figures, "profile": profile_text}


async def stub_throughput(url: str, seconds: float) -> dict[str, Any]:
    """Requests/s the stub answers at 100 ms latency with 256 requests in flight."""
    body = {"model": "stub", "messages": sample_messages()}
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=connector) as session:
        done = 0
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                async with session.post(url + "/chat/completions", json=body) as response:
                    await response.read()
                    if response.status == 200:
                        done += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(256)))
        elapsed = time.perf_counter() - started
    return {"latency_ms": 100, "in_flight": 256, "requests": done, "requests_per_s": done / elapsed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (about 20 s)")
    parser.add_argument("--calls", type=int, default=None, help="calls per path for bare and ctxprec")
    parser.add_argument("--profile", action="store_true", help="cProfile one round of the ctxprec path")
    args = parser.parse_args(argv)
    calls = args.calls or (1200 if args.quick else 6000)
    litellm_calls = max(CONCURRENCY * 2, calls // (4 if args.quick else 6))
    rounds = 2 if args.quick else 3

    proc, url = start_stub(0)
    try:
        measured = asyncio.run(measure(url, calls, litellm_calls, rounds, args.profile))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    proc, url = start_stub(100)
    try:
        throughput = asyncio.run(stub_throughput(url, 3.0 if args.quick else 8.0))
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    paths = measured["paths"]
    bare = paths["bare_aiohttp"]["cpu_ms_per_call"]
    ratios = {"ctxprec_over_bare": paths["ctxprec"]["cpu_ms_per_call"] / bare,
              "litellm_over_bare": paths["litellm"]["cpu_ms_per_call"] / bare}
    result = {
        "benchmark": "judge_client_cpu",
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "concurrency": CONCURRENCY,
        "quick": args.quick,
        "paths": paths,
        "ratios": ratios,
        "goal": "ctxprec_over_bare <= 3",
        "goal_met": ratios["ctxprec_over_bare"] <= 3.0,
        "stub_throughput": throughput,
    }
    for name, fig in paths.items():
        sys.stdout.write(f"{name:13s} {fig['cpu_ms_per_call']:7.3f} ms CPU/call  {fig['calls_per_s']:8.0f} calls/s  ({fig['calls']} calls)\n")
    sys.stdout.write(f"ctxprec/bare {ratios['ctxprec_over_bare']:.2f}x   litellm/bare {ratios['litellm_over_bare']:.1f}x   "
                     f"goal <= 3x: {'met' if result['goal_met'] else 'MISSED'}\n")
    sys.stdout.write(f"stub judge at 100 ms latency: {throughput['requests_per_s']:.0f} req/s\n")
    if measured["profile"]:
        sys.stdout.write(measured["profile"])
    write_result("judge_client_cpu", result, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
