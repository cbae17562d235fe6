"""One request as large as `--max-spans-per-request` allows (100,000 tiny spans, each its own
sampled trace: the most work per byte) does not hold the event loop: /healthz, probed every
50 ms over new connections while it is read and assembled, keeps answering. One span more is
refused before any work per span, over OTLP/HTTP and gRPC, and counted."""
from __future__ import annotations

import asyncio
import os
import threading
import time
import urllib.request
from typing import Any

import aiohttp
import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.collector.rag_app import running, scrape, serve_config, value

LIMIT = 100_000
PB = {"Content-Type": "application/x-protobuf"}


def tiny_spans(n: int) -> bytes:
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for _ in range(n):
        spans.add(trace_id=os.urandom(16), span_id=os.urandom(8), name="s")
    return request.SerializeToString()


def probe(url: str, stop: threading.Event) -> list[float]:
    """/healthz every 50 ms from another thread: a probe on the sidecar's own event loop would
    wait out a stall before it even sent its request, and never see it."""
    latencies = []
    while not stop.is_set():
        started = time.perf_counter()
        with urllib.request.urlopen(f"{url}/healthz", timeout=10.0) as response:
            assert response.status == 200
        latencies.append(time.perf_counter() - started)
        time.sleep(0.05)
    return latencies


async def test_a_request_at_the_span_limit_leaves_healthz_answering_and_one_past_it_is_refused() -> None:
    at_limit, over = tiny_spans(LIMIT), tiny_spans(LIMIT + 1)
    async with running(serve_config("--sample-rate", "1")) as pipeline:
        url = pipeline.metrics_url
        stop = threading.Event()
        prober = asyncio.ensure_future(asyncio.to_thread(probe, url, stop))
        await asyncio.sleep(0.2)
        started = time.perf_counter()
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces", data=at_limit,
                                    headers=PB) as response:
                assert response.status == 200
            took = time.perf_counter() - started
            await asyncio.sleep(1.0)  # the traces it evicted are handed out meanwhile
            stop.set()
            latencies = await prober
            # The slowest answer stays far below a liveness probe's timeout; before the work was
            # shared it waited for the whole request (seconds).
            assert max(latencies) < min(1.0, took / 2), (took, sorted(latencies)[-5:])

            async with session.post(f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces", data=over,
                                    headers=PB) as response:
                assert response.status == 413
                assert b"over the limit of 100000 spans" in await response.read()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{pipeline.otlp_grpc_port}") as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                         request_serializer=None,
                                         response_deserializer=ExportTraceServiceResponse.FromString)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await export(over)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/metrics") as response:
                m: Any = scrape(await response.text())
    assert value(m, "ctxprec_spans_received_total", receiver="otlp_http") == LIMIT
    for receiver in ("otlp_http", "otlp_grpc"):
        assert value(m, "ctxprec_receiver_errors_total", receiver=receiver, reason="too_many_spans") == 1
