"""Span mode: the latency that forwarding through ctxprec adds to unsampled traffic.

A load generator sends OTLP/HTTP protobuf requests (5 RAG traces of 8 spans each) at 5,000
spans/s, open loop. Each trace's send time is stamped; a downstream OTLP/HTTP endpoint in the
same process stamps its arrival. Baseline, in the same run: the same traffic sent straight to
the downstream. Then the same traffic through a ctxprec sidecar (receiver + OtlpIngest at sample
rate 1% + OtlpSender) running in its own process. Added latency = sidecar path - direct path,
per percentile, over unsampled traces only. Goal: p99 added < 5 ms.

    .venv/bin/python -m bench.forward_latency [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import statistics
import time
from typing import Any

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from bench.common import machine, write_result
from bench.ingest import SPANS_PER_TRACE, _DecidingSink, wait_port, writeback_to
from tests.helpers.processes import free_port
from tests.helpers.rag_traces import kv, realistic_rag_trace

SPANS_PER_S = 5_000
TRACES_PER_REQUEST = 5
SAMPLE_RATE = 0.01


def _sidecar(http_port: int, forward_to: str) -> None:
    async def serve() -> None:
        from ctxprec.collector.assembly.ingest import OtlpIngest
        from ctxprec.collector.metrics.registry import Metrics
        from ctxprec.collector.receivers.config import ReceiversConfig
        from ctxprec.collector.receivers.otlp_http import OtlpHttpReceiver
        from ctxprec.collector.sampling.sampler import Sampler

        metrics = Metrics()
        writeback = writeback_to(forward_to, metrics)
        await writeback.start()
        ingest = OtlpIngest(keep_trace=Sampler(SAMPLE_RATE).keep_trace, sink=_DecidingSink(writeback),
                            metrics=metrics, passthrough=writeback)
        await ingest.start()
        receiver = OtlpHttpReceiver(ingest, metrics=metrics,
                                    settings=ReceiversConfig(otlp_http=f"127.0.0.1:{http_port}").http())
        await receiver.start()
        await asyncio.Event().wait()  # until terminated

    asyncio.run(serve())


class Downstream:
    """Records the arrival time of every trace id it receives."""

    def __init__(self) -> None:
        self.arrivals: dict[bytes, int] = {}

    async def traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        now = time.monotonic_ns()
        parsed = ExportTraceServiceRequest.FromString(body)
        for rs in parsed.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    self.arrivals.setdefault(span.trace_id, now)
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def start(self, port: int) -> web.AppRunner:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self.traces)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner


def build_requests(n: int, seed: int) -> list[tuple[bytes, list[bytes]]]:
    from ctxprec.collector.sampling.sampler import Sampler

    keep = Sampler(SAMPLE_RATE).keep_trace
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.append(kv("service.name", "support-bot"))
        ss = rs.scope_spans.add()
        unsampled = []
        for _ in range(TRACES_PER_REQUEST):
            spans = realistic_rag_trace(rng)
            ss.spans.extend(spans)
            if not keep(spans[0].trace_id, "support-bot"):
                unsampled.append(spans[0].trace_id)
        out.append((request.SerializeToString(), unsampled))
    return out


async def run_load(url: str, requests: list[tuple[bytes, list[bytes]]], downstream: Downstream) -> dict[str, float]:
    """Open-loop load at SPANS_PER_S; returns latency percentiles (ms) of unsampled traces."""
    interval = TRACES_PER_REQUEST * SPANS_PER_TRACE / SPANS_PER_S
    sent: dict[bytes, int] = {}
    errors = 0
    async with ClientSession(connector=TCPConnector(limit=64), timeout=ClientTimeout(total=10)) as session:
        async def send(body: bytes, ids: list[bytes]) -> None:
            nonlocal errors
            now = time.monotonic_ns()
            for trace in ids:
                sent[trace] = now
            try:
                async with session.post(url, data=body, headers={"Content-Type": "application/x-protobuf"}) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors += 1
            except Exception:
                errors += 1

        tasks = []
        start = time.perf_counter()
        for i, (body, ids) in enumerate(requests):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(body, ids)))
        await asyncio.gather(*tasks)
        achieved = len(requests) * TRACES_PER_REQUEST * SPANS_PER_TRACE / (time.perf_counter() - start)
    deadline = time.monotonic() + 10
    while any(t not in downstream.arrivals for t in sent) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    latencies = sorted((downstream.arrivals[t] - s) / 1e6 for t, s in sent.items() if t in downstream.arrivals)
    lost = sum(1 for t in sent if t not in downstream.arrivals)
    q = statistics.quantiles(latencies, n=1000)
    return {"p50_ms": round(statistics.median(latencies), 3), "p90_ms": round(q[899], 3),
            "p99_ms": round(q[989], 3), "max_ms": round(latencies[-1], 3), "traces": len(latencies),
            "lost_traces": lost, "send_errors": errors, "achieved_spans_per_s": round(achieved)}


async def measure(duration_s: float) -> dict[str, Any]:
    n = int(duration_s * SPANS_PER_S / (TRACES_PER_REQUEST * SPANS_PER_TRACE))
    downstream = Downstream()
    down_port = free_port()
    runner = await downstream.start(down_port)
    sidecar_port = free_port()
    sidecar = multiprocessing.get_context("spawn").Process(
        target=_sidecar, args=(sidecar_port, f"http://127.0.0.1:{down_port}"), daemon=True)
    sidecar.start()
    try:
        await asyncio.to_thread(wait_port, sidecar_port, 30.0)
        warm = build_requests(50, seed=1)
        await run_load(f"http://127.0.0.1:{sidecar_port}/v1/traces", warm, downstream)
        direct = await run_load(f"http://127.0.0.1:{down_port}/v1/traces", build_requests(n, seed=2), downstream)
        via = await run_load(f"http://127.0.0.1:{sidecar_port}/v1/traces", build_requests(n, seed=3), downstream)
    finally:
        sidecar.terminate()
        sidecar.join(5)
        await runner.cleanup()
    added = {k: round(via[k] - direct[k], 3) for k in ("p50_ms", "p90_ms", "p99_ms")}
    return {"direct": direct, "via_ctxprec": via, "added": added}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5 s per path instead of 20 s")
    args = parser.parse_args()
    result = asyncio.run(measure(5.0 if args.quick else 20.0))
    out = {
        "benchmark": "forward_latency",
        "quick": args.quick,
        "machine": machine(),
        "load": f"{SPANS_PER_S} spans/s, OTLP/HTTP protobuf, {TRACES_PER_REQUEST} traces x {SPANS_PER_TRACE} spans "
                f"per request, sample rate {SAMPLE_RATE}; latency of unsampled traces",
        **result,
        "goal_p99_added_ms": 5.0,
        "meets_goal": result["added"]["p99_ms"] < 5.0,
    }
    d, v, a = result["direct"], result["via_ctxprec"], result["added"]
    print(f"direct to downstream : p50 {d['p50_ms']:.2f} ms  p99 {d['p99_ms']:.2f} ms  ({d['traces']} traces)")
    print(f"through ctxprec      : p50 {v['p50_ms']:.2f} ms  p99 {v['p99_ms']:.2f} ms  ({v['traces']} traces, "
          f"{v['lost_traces']} lost)")
    print(f"added by ctxprec     : p50 {a['p50_ms']:.2f} ms  p99 {a['p99_ms']:.2f} ms  (goal p99 < 5 ms)")
    write_result("forward_latency", out, quick=args.quick)


if __name__ == "__main__":
    main()
