"""A body over the OTLP/HTTP limit is answered 413 with `Connection: close`, as the OpenTelemetry
Collector answers, and the client is not reset while it still sends: the rest of the body is read
and dropped after the answer (it was closed unread, and the kernel reset the connection under the
client, which took it for a network error and sent the same body again). A real SDK exporter
gets the 413 and does not retry. A malformed body or malformed HTTP gets 400."""
from __future__ import annotations

import asyncio
import socket

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.collector.rag_app import running, serve_config

MB = 1024 * 1024


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, body


def post_raw(port: int, body_size: int, *, chunked: bool) -> tuple[int, int, dict[str, str], bytes, bytes]:
    """Sends the whole body (as a client that reads only once it has sent, like urllib3), then
    reads the answer and what follows it. Returns the bytes sent, the status, headers, body, and
    what the socket gave after the answer (b'': closed)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    with sock:
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {body_size}"
        sock.sendall(f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                     f"{framing}\r\n\r\n".encode())
        block, sent = b"\x00" * 65536, 0
        while sent < body_size:
            sock.sendall((b"10000\r\n" + block + b"\r\n") if chunked else block)
            sent += len(block)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
        status, headers, body = read_response(sock)
        return sent, status, headers, body, sock.recv(1)


async def test_a_body_over_the_limit_is_answered_413_and_the_client_is_never_reset() -> None:
    async with running(serve_config("--judge-model", "local", "--max-request-mb", "16")) as pipeline:
        port = pipeline.otlp_http_port
        assert port is not None
        for chunked in (False, True):  # a Content-Length over the limit; a chunked body that passes it
            sent, status, headers, body, after = await asyncio.to_thread(post_raw, port, 24 * MB, chunked=chunked)
            assert sent == 24 * MB  # no reset while sending
            assert status == 413 and headers["connection"] == "close"
            assert b"over the limit of 16777216 bytes" in body
            assert after == b""  # then closed
        errors = pipeline.metrics.receiver_errors.labels(receiver="otlp_http", reason="too_large")._value.get()
        assert errors == 2


async def test_an_sdk_exporter_gets_the_413_and_does_not_send_again() -> None:
    async with running(serve_config("--judge-model", "local", "--max-request-mb", "1")) as pipeline:
        provider = TracerProvider()
        kept = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(kept))
        tracer = provider.get_tracer("big")
        for i in range(40):
            with tracer.start_as_current_span(f"span-{i}") as span:
                span.set_attribute("payload", "x" * 40_000)
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces", timeout=20)
        result = await asyncio.to_thread(exporter.export, kept.get_finished_spans())
        exporter.shutdown()
        assert result is SpanExportResult.FAILURE
        refused = pipeline.metrics.receiver_errors.labels(receiver="otlp_http", reason="too_large")._value.get()
        assert refused == 1  # one request: a 413 is not retried


def exchange(port: int, requests: list[bytes]) -> list[int]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        statuses = []
        for request in requests:
            sock.sendall(request)
            statuses.append(read_response(sock)[0])
        return statuses


async def test_malformed_bodies_and_malformed_http_get_400() -> None:
    async with running(serve_config("--judge-model", "local")) as pipeline:
        port = pipeline.otlp_http_port
        head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        not_protobuf = head + b"Content-Length: 5\r\n\r\n\xff\xff\xff\xff\xff"
        empty = head + b"Content-Length: 0\r\n\r\n"
        # A bad body is read whole: the connection stays usable for the next request.
        assert await asyncio.to_thread(exchange, port, [not_protobuf, empty]) == [400, 200]
        bad_chunk = head + b"Transfer-Encoding: chunked\r\n\r\nnot-hex\r\nabc\r\n0\r\n\r\n"
        assert await asyncio.to_thread(exchange, port, [bad_chunk]) == [400]
