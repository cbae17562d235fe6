"""Every listener closes slow, idle and surplus connections (a sidecar in this process, attacked
over real sockets), counts them in `ctxprec_listener_connections_refused_total`, and /healthz
keeps answering beside them."""
from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any, AsyncIterator

import grpc
from ctxprec.collector.listeners import REASONS
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.chaos.scrape_http import healthz_seconds, scrape_metrics
from tests.collector.rag_app import running, serve_config, value
from tests.helpers.rag_traces import rag_trace, request_of, trace_id

LIMITS = ("--listener-header-timeout", "0.5", "--listener-body-timeout", "0.5", "--listener-idle-timeout", "1")
LISTENERS = ("otlp_http", "metrics")


@contextlib.asynccontextmanager
async def sidecar(*flags: str) -> AsyncIterator[Any]:
    async with running(serve_config(*LIMITS, *flags)) as pipeline:
        yield pipeline


def ports(pipeline: Any) -> dict[str, int]:
    return {"otlp_http": pipeline.otlp_http_port, "metrics": pipeline.metrics_server.port}


def refused(all_samples: dict, listener: str, reason: str) -> float:
    return value(all_samples, "ctxprec_listener_connections_refused_total", listener=listener, reason=reason)


async def closed_after(port: int, first: bytes = b"", drip: bytes = b"", every_s: float = 0.1,
                       limit_s: float = 10.0) -> tuple[float, bytes]:
    """Connects, sends `first`, then `drip` every `every_s`; returns when the server closes the
    connection: the seconds it stayed open and what the server sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.perf_counter()
    got = b""
    try:
        if first:
            writer.write(first)
        while time.perf_counter() - started < limit_s:
            try:
                chunk = await asyncio.wait_for(reader.read(65536), every_s)
            except asyncio.TimeoutError:
                if drip:
                    writer.write(drip)
                continue
            except ConnectionError:
                break
            if not chunk:
                break
            got += chunk
        return time.perf_counter() - started, got
    finally:
        writer.transport.abort()


async def probe_while(pipeline: Any, work: "asyncio.Future[Any]") -> list[float]:
    """/healthz every 0.1 s until `work` is done: each answer's latency."""
    latencies = []
    while not work.done():
        latencies.append(await healthz_seconds(pipeline.metrics_url))
        await asyncio.sleep(0.1)
    return latencies


async def test_slowloris_and_idle_connections_are_closed_and_healthz_answers_beside_them() -> None:
    async with sidecar("--listener-max-connections", "500") as pipeline:
        attacks = []
        for port in ports(pipeline).values():
            # Headers sent one byte at a time, never finished; and connections that send nothing.
            attacks += [closed_after(port, b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nX-Slow: ", drip=b"a")
                        for _ in range(40)]
            attacks += [closed_after(port) for _ in range(40)]
        work = asyncio.ensure_future(asyncio.gather(*attacks))
        latencies = await probe_while(pipeline, work)
        held = [seconds for seconds, _ in work.result()]
        assert max(held) < 3.0, max(held)  # the header timeout is 0.5 s
        assert latencies and max(latencies) < 2.0, latencies
        after = await scrape_metrics(pipeline.metrics_url)
        for listener in LISTENERS:
            assert refused(after, listener, "timeout") == 40, listener
            assert refused(after, listener, "idle") == 40, listener

        # A kept-alive connection is closed after the idle timeout, counted as idle.
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        seconds, answer = await closed_after(pipeline.metrics_server.port, request)
        assert answer.startswith(b"HTTP/1.1 200") and 0.8 < seconds < 3.0, (seconds, answer[:40])
        assert refused(await scrape_metrics(pipeline.metrics_url), "metrics", "idle") == 41


async def test_a_body_shorter_than_its_content_length_times_out_and_one_too_large_is_refused_unread() -> None:
    async with sidecar() as pipeline:
        otlp, metrics = ports(pipeline)["otlp_http"], ports(pipeline)["metrics"]
        short = (b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                 b"Content-Length: 1000\r\n\r\n" + b"\x0a" * 10)
        seconds, answer = await closed_after(otlp, short)
        assert answer.startswith(b"HTTP/1.1 408") and seconds < 3.0, (seconds, answer[:60])
        assert b"not received within 0.5 s" in answer

        huge = (b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000000000000000\r\n\r\n" + b"{" * 1000)
        seconds, answer = await closed_after(otlp, huge)
        assert answer.startswith(b"HTTP/1.1 413") and seconds < 0.5, (seconds, answer[:60])
        assert b"over the limit of 16777216 bytes" in answer

        seconds, answer = await closed_after(metrics, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                                      b"Content-Length: 1000000000000000\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 413") and seconds < 0.5, (seconds, answer[:60])
        # A GET with a body nobody reads is answered, then closed rather than drained.
        seconds, answer = await closed_after(metrics, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                                      b"Content-Length: 100\r\n\r\n", drip=b"z")
        assert answer.startswith(b"HTTP/1.1 200") and seconds < 0.5, (seconds, answer[:60])

        after = await scrape_metrics(pipeline.metrics_url)
        assert refused(after, "otlp_http", "timeout") == 1 and refused(after, "otlp_http", "too_large") == 1
        assert refused(after, "metrics", "too_large") == 1
        assert value(after, "ctxprec_receiver_errors_total", receiver="otlp_http", reason="timeout") == 1


async def test_past_the_cap_a_silent_connection_makes_room_and_clients_are_kept() -> None:
    async with sidecar("--listener-max-connections", "4", "--listener-header-timeout", "5",
                       "--listener-body-timeout", "5", "--listener-idle-timeout", "30") as pipeline:
        metrics_port, otlp = ports(pipeline)["metrics"], ports(pipeline)["otlp_http"]
        probe = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        client = await asyncio.open_connection("127.0.0.1", metrics_port)  # a kept-alive client, oldest
        client[1].write(probe)
        assert (await asyncio.wait_for(client[0].read(1024), 2.0)).startswith(b"HTTP/1.1 200")
        silent = [await asyncio.open_connection("127.0.0.1", metrics_port) for _ in range(3)]
        await asyncio.sleep(0.1)
        # Full: a new connection (a probe) closes the oldest connection that never sent a request.
        assert await healthz_seconds(pipeline.metrics_url) < 2.0
        assert await asyncio.wait_for(silent[0][0].read(), 2.0) == b""
        client[1].write(probe)  # the client's connection was kept
        assert (await asyncio.wait_for(client[0].read(1024), 2.0)).startswith(b"HTTP/1.1 200")
        assert refused(await scrape_metrics(pipeline.metrics_url), "metrics", "too_many") >= 1

        # Four requests under way (their bodies still coming): a fifth connection is closed at once.
        partial = (b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                   b"Content-Length: 100\r\n\r\n" + b"\x0a")
        busy = []
        for _ in range(4):
            reader, writer = await asyncio.open_connection("127.0.0.1", otlp)
            writer.write(partial)
            busy.append((reader, writer))
        await asyncio.sleep(0.2)
        seconds, answer = await closed_after(otlp, b"")
        assert seconds < 0.5 and answer == b"", seconds
        for reader, writer in busy + silent[1:] + [client]:
            writer.transport.abort()
        assert refused(await scrape_metrics(pipeline.metrics_url), "otlp_http", "too_many") == 1


async def test_every_reason_starts_at_zero_for_each_http_listener() -> None:
    async with sidecar() as pipeline:
        before = await scrape_metrics(pipeline.metrics_url)
    for listener in LISTENERS:
        for reason in REASONS:
            key = ("ctxprec_listener_connections_refused_total", (("listener", listener), ("reason", reason)))
            assert before.get(key) == 0.0, key


async def test_grpc_closes_connections_that_never_handshake_and_channels_left_idle() -> None:
    async with sidecar("--listener-header-timeout", "1", "--listener-idle-timeout", "1") as pipeline:
        port = pipeline.otlp_grpc_port
        loop = asyncio.get_running_loop()
        with socket.create_connection(("127.0.0.1", port)) as sock:  # says nothing at all
            sock.setblocking(False)
            started = time.perf_counter()
            while await asyncio.wait_for(loop.sock_recv(sock, 65536), 10.0):
                pass
            assert time.perf_counter() - started < 5.0

        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                         request_serializer=None,
                                         response_deserializer=ExportTraceServiceResponse.FromString)
            await export(request_of(rag_trace(trace_id(False))).SerializeToString())
            assert channel.get_state() == grpc.ChannelConnectivity.READY
            deadline = time.monotonic() + 5.0
            while channel.get_state() == grpc.ChannelConnectivity.READY:  # the server's GOAWAY
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
