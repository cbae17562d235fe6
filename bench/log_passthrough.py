"""OTLP logs through `ctxprec serve` to a downstream receiver: log records per CPU-second of the
whole process, against a bare `ExportLogsServiceRequest.ParseFromString` loop over the same bytes
in the same run. Goals: an app's own logs >= 20% of the bare parse rate (the goal spans have);
GenAI events, which are read, at least what spans reach (bench/ingest.py's whole-serve ratio,
0.095 in its committed result).

Requests of 512 records each (the SDK's batch), OTLP/HTTP protobuf in, forwarded to a discard
endpoint in another process, counted when every record was delivered (`ctxprec_exported_spans_total
{exporter="log_forwarder",outcome="ok"}`). Two mixes:

- `app_logs`: an app's own log lines (no GenAI event): passed on after one byte search;
- `genai_events`: every record a GenAI event (`gen_ai.user.message`, `gen_ai.choice`) tied to a
  span, traces sampled at 1%: the sampled traces' records are read and join the assembly buffer.

    .venv/bin/python -m bench.log_passthrough [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import time
from typing import Any

from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from bench.common import machine, post_all, prometheus_samples, serve_beside_stub_judge, wait_port, write_result
from bench.ingest import _discard_server
from tests.helpers.processes import free_port

RECORDS_PER_REQUEST = 512
APP_LOGS_GOAL = 0.2
GENAI_GOAL = 0.095
OK = ("ctxprec_exported_spans_total", (("exporter", "log_forwarder"), ("outcome", "ok")))


def build_bodies(n_requests: int, genai: bool, seed: int = 7) -> list[bytes]:
    """Requests as the SDK's OTLP encoder writes them: app log lines, or GenAI events in spans."""
    rng = random.Random(seed)
    memory = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "support-bot", "service.version": "1.4.2"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = provider.get_logger("opentelemetry.instrumentation.openai_v2" if genai else "support_bot.views")
    tracer = TracerProvider().get_tracer("bench")
    bodies = []
    for _ in range(n_requests):
        for i in range(0, RECORDS_PER_REQUEST, 2):
            if genai:
                with tracer.start_as_current_span("chat gpt-4o-mini"):
                    logger.emit(event_name="gen_ai.user.message", attributes={"gen_ai.system": "openai"},
                                body={"content": f"Context: passage {rng.random()} about resetting passwords. "
                                                 "Question: How do I reset my password?"})
                    logger.emit(event_name="gen_ai.choice", attributes={"gen_ai.system": "openai"},
                                body={"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "Open Settings > Security."}})
            else:
                for j in (i, i + 1):
                    logger.emit(body=f"GET /api/answer 200 in {rng.randint(20, 900)} ms (request {j})",
                                severity_number=SeverityNumber.INFO, severity_text="INFO",
                                attributes={"http.route": "/api/answer", "code.function": "answer"})
        bodies.append(encode_logs(memory.get_finished_logs()).SerializeToString())
        memory.clear()
    provider.shutdown()
    return bodies


def bare_parse_rate(bodies: list[bytes], records: int, rounds: int = 3) -> float:
    best = 0.0
    for _ in range(rounds):
        t0 = time.process_time()
        for body in bodies:
            ExportLogsServiceRequest().ParseFromString(body)
        best = max(best, records / max(time.process_time() - t0, 1e-9))
    return best


async def serve_rate(bodies: list[bytes], records: int, forward_port: int, warm_up: list[bytes],
                     concurrency: int = 4) -> dict[str, Any]:
    """The whole `ctxprec serve`: its CPU seconds and the wall time until every record was delivered."""
    import aiohttp
    import psutil

    with serve_beside_stub_judge(forward_port) as (serve, http_port, metrics_port):
        process = psutil.Process(serve.pid)
        url = f"http://127.0.0.1:{http_port}/v1/logs"
        async with aiohttp.ClientSession() as session:
            async def delivered() -> float:
                async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as response:
                    return prometheus_samples(await response.text()).get(OK, 0.0)

            await post_all(session, url, warm_up, concurrency=1)
            await asyncio.sleep(1.0)
            want = await delivered() + records
            cpu0 = process.cpu_times()
            t0 = time.perf_counter()
            await post_all(session, url, bodies, concurrency)
            deadline = time.monotonic() + 120
            got = 0.0
            while time.monotonic() < deadline:
                got = await delivered()
                if got >= want:
                    break
                await asyncio.sleep(0.2)
            wall = time.perf_counter() - t0
            cpu1 = process.cpu_times()
    if got < want:
        raise RuntimeError(f"only {got - want + records:.0f} of {records} records delivered")
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {"records_per_cpu_s": records / max(cpu, 1e-9), "records_per_wall_s": records / wall, "cpu_s": cpu,
            "wall_s": wall}


def measure(genai: bool, n_requests: int, rounds: int, port: int) -> dict[str, Any]:
    bodies = build_bodies(n_requests, genai)
    warm_up = build_bodies(4, genai, seed=11)
    records = n_requests * RECORDS_PER_REQUEST
    runs = []
    for _ in range(rounds):
        before = bare_parse_rate(bodies, records)
        run = asyncio.run(serve_rate(bodies, records, port, warm_up))
        run["bare"] = max(before, bare_parse_rate(bodies, records))
        run["ratio"] = run["records_per_cpu_s"] / run["bare"]
        runs.append(run)
    median = sorted(runs, key=lambda r: r["ratio"])[len(runs) // 2]
    return {
        "records": records,
        "avg_record_bytes": round(sum(map(len, bodies)) / records, 1),
        "bare_parse_records_per_s": round(median["bare"]),
        "serve_records_per_cpu_s": round(median["records_per_cpu_s"]),
        "serve_records_per_wall_s": round(median["records_per_wall_s"]),
        "serve_process_ratio": round(median["ratio"], 3),
        "rounds": [{k: round(v, 3) for k, v in run.items()} for run in runs],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer requests and rounds")
    args = parser.parse_args(argv)
    # 600,000 records a mix: the server's CPU time in seconds, not in tenths (ticks of 10 ms).
    n_requests, rounds = (40, 1) if args.quick else (1200, 3)
    port = free_port()
    server = multiprocessing.get_context("spawn").Process(target=_discard_server, args=(port,), daemon=True)
    server.start()
    try:
        wait_port(port)
        app_logs = measure(False, n_requests, rounds, port)
        genai = measure(True, n_requests, rounds, port)
    finally:
        server.terminate()
        server.join(5)
    goal_met = app_logs["serve_process_ratio"] >= APP_LOGS_GOAL and genai["serve_process_ratio"] >= GENAI_GOAL
    out = {
        "benchmark": "log_passthrough",
        "description": ("OTLP log records per CPU-second of the whole `ctxprec serve` process (OTLP/HTTP protobuf in, "
                        "forwarded to a discard endpoint in another process, counted once all were delivered), "
                        "against a bare ExportLogsServiceRequest.ParseFromString of the same requests; the median "
                        "round of each mix"),
        "quick": args.quick,
        "machine": machine(),
        "records_per_request": RECORDS_PER_REQUEST,
        "sample_rate": 0.01,
        "app_logs": app_logs,
        "genai_events": genai,
        "serve_process_ratio": app_logs["serve_process_ratio"],
        "goal": f"app logs >= {APP_LOGS_GOAL} of the bare parse rate, GenAI events >= {GENAI_GOAL} (spans' figure)",
        "goal_met": goal_met,
    }
    path = write_result("log_passthrough", out, quick=args.quick)
    print(f"app logs: {app_logs['serve_records_per_cpu_s']:,} records/CPU-s "
          f"({app_logs['serve_records_per_wall_s']:,}/s wall), {app_logs['serve_process_ratio']:.3f} of bare parse; "
          f"GenAI events: {genai['serve_records_per_cpu_s']:,} records/CPU-s, {genai['serve_process_ratio']:.3f}; "
          f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
