"""Issue 32's table, before and after: traces as production sends them, against the whole
`ctxprec serve` process.

Each case (tests/helpers/arrivals.py: captured LangChain/OpenInference traces, sent with the real
OpenTelemetry SDK exporters over OTLP/HTTP and gRPC) goes into a `ctxprec serve` process (span
mode, sample rate 1, every other setting at its default, `ctxprec stub-judge` in its own process)
forwarding to a real OTLP receiver in this process. Per case: decisions (the sidecar's
`ctxprec_samples_total` for the case's service), retrieval spans forwarded with a score, answers
used (scored against an LLM span's answer), spans acknowledged and forwarded. The code of git
ref `--ref` (default main) and this tree's run side by side, at the same time, on the same cases.

    .venv/bin/python -m bench.arrival_cases [--ref main] [--quick]

Cases (20 traces each unless said): the retrieval span 5 s and 10 s after the rest of its trace;
the LLM span 5 s and 30 s after a trace whose root came first; one agent trace of 300 steps, one
a second, no root (a trace that never ends); one trace of 500 retrievals spread over 60 s; a
whole trace sent twice 0.3 s apart. `--quick`: 5 traces a case, 60 steps, 100 retrievals.
"""
from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import baseline_code, env_for, machine, prometheus_samples, wait_port, write_result
from tests.helpers import arrivals
from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.processes import free_port

DRAIN_S = 75.0  # past the last send: the span hold deadline (60 s) and the answer wait


def cases(quick: bool) -> list[arrivals.Case]:
    n = 5 if quick else 20
    steps, spread = (60, 100) if quick else (300, 500)
    return [
        arrivals.late_retrieval(n, 5.0, name="late_retrieval_5s"),
        arrivals.late_retrieval(n, 10.0, name="late_retrieval_10s"),
        arrivals.late_answer(n, 5.0, name="late_answer_5s"),
        arrivals.late_answer(n, 30.0, name="late_answer_30s"),
        arrivals.agent_steps(steps, 1.0, root_at_end=False, name="never_ending"),
        # Two steps (16 spans) a request, the requests evenly over 60 s.
        arrivals.agent_steps(spread, 60.0 / (spread / 2), root_at_end=True, name="spread_60s", per_send=2),
        arrivals.resent(n, 0.3, name="resend_0.3s"),
    ]


class Sidecar:
    def __init__(self, code: Path | None, forward_url: str) -> None:
        self.judge_port, self.http_port, self.grpc_port, self.metrics_port = (free_port() for _ in range(4))
        env = {**env_for(code), "OPENAI_API_KEY": "bench"}
        self.judge = subprocess.Popen([sys.executable, "-m", "ctxprec.collector.stub_judge", "--port",
                                       str(self.judge_port)], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        self.serve = subprocess.Popen(
            [sys.executable, "-m", "ctxprec.collector.cli", "serve", "--otlp-grpc", f"127.0.0.1:{self.grpc_port}",
             "--otlp-http", f"127.0.0.1:{self.http_port}", "--metrics", f"127.0.0.1:{self.metrics_port}",
             "--forward-to", forward_url, "--write-back", "span", "--sample-rate", "1",
             "--judge-model", "openai/stub", "--judge-api-base", f"http://127.0.0.1:{self.judge_port}/v1",
             "--log-level", "warning"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.judge_port)
        wait_port(self.metrics_port, timeout=60)
        wait_port(self.http_port, timeout=60)

    async def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as response:
                return prometheus_samples(await response.text())

    def stop(self) -> None:
        for proc in (self.serve, self.judge):
            proc.terminate()
        for proc in (self.serve, self.judge):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


async def run_one(label: str, code: Path | None, quick: bool) -> dict[str, Any]:
    capture = await OtlpCapture(record_bodies=False, logs=False, metrics=False).start()
    sidecar = await asyncio.to_thread(Sidecar, code, capture.http_url)
    try:
        todo = cases(quick)
        exporters = arrivals.Exporters(sidecar.http_port, sidecar.grpc_port)
        started = time.monotonic()
        try:
            acknowledged = await arrivals.send_all(todo, exporters)
        finally:
            exporters.close()
        sent_s = time.monotonic() - started
        total_sent = sum(acknowledged.values())
        retrievals = sum(len(c.retrievals) for c in todo)
        deadline = time.monotonic() + DRAIN_S
        # Until everything is forwarded and decided, or the drain time is over (what never
        # comes is what the table reports).
        while time.monotonic() < deadline:
            samples = await sidecar.samples()
            decided = sum(v for (name, _), v in samples.items() if name == "ctxprec_samples_total")
            if len(capture.spans) >= total_sent and decided >= retrievals:
                break
            await asyncio.sleep(1.0)
        await asyncio.sleep(2.0)  # anything still on its way
        samples = await sidecar.samples()
        out = {case.name: {**arrivals.tally(case, samples, capture.spans).as_dict(),
                           "spans_acknowledged": acknowledged[case.name]} for case in todo}
        counters = {name: samples.get((f"ctxprec_{name}_total", ()), None)
                    for name in ("late_spans", "late_spans_joined", "late_answers", "resent_spans")}
        print(f"{label}: sent in {sent_s:.0f} s", file=sys.stderr)
        return {"cases": out, "counters": counters, "send_s": round(sent_s, 1)}
    finally:
        await asyncio.to_thread(sidecar.stop)
        await capture.stop()


async def main_async(ref: str, quick: bool) -> dict[str, Any]:
    with baseline_code(ref) as (commit, path):
        before, after = await asyncio.gather(run_one("before", path, quick), run_one("after", None, quick))
    return {"ref": ref, "commit": commit, "before": before, "after": after}


def table(result: dict[str, Any]) -> str:
    lines = ["| case | retrievals | decisions before -> after | answers used | scored retrieval copies / sent "
             "| spans forwarded / acknowledged |", "|---|---|---|---|---|---|"]
    for name, after in result["after"]["cases"].items():
        before = result["before"]["cases"][name]
        lines.append(
            f"| {name} | {after['retrievals']} | {before['decisions']} -> {after['decisions']} "
            f"| {before['answers_used']} -> {after['answers_used']} "
            f"| {before['retrieval_copies_scored']}/{before['retrieval_copies_sent']} -> "
            f"{after['retrieval_copies_scored']}/{after['retrieval_copies_sent']} "
            f"| {before['spans_forwarded']}/{before['spans_acknowledged']} -> "
            f"{after['spans_forwarded']}/{after['spans_acknowledged']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", default="main", help="git ref whose code is 'before' (default main)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args.ref, args.quick))
    result["machine"] = machine()
    result["table"] = table(result)
    print(result["table"])
    print(f"counters before: {result['before']['counters']}\ncounters after: {result['after']['counters']}")
    write_result("arrival_cases", result, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
