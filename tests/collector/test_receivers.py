"""OTLP/HTTP and OTLP/gRPC receivers fed by the real OpenTelemetry SDK exporters, plus bad and
hostile input: clear rejections, counters that move, and a receiver that keeps serving."""
from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

import aiohttp
import grpc
import pytest
import requests
from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.assembly.conventions import ConventionConfig
from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest
from ctxprec.collector.components import shutdown
from ctxprec.collector.config import ConfigError
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.receivers.config import ReceiversConfig
from ctxprec.collector.receivers.otlp_grpc import OtlpGrpcReceiver
from ctxprec.collector.receivers.otlp_http import OtlpHttpReceiver
from ctxprec.collector.listener_security import ListenerSecurity
from ctxprec.collector.sampling.sampler import Sampler
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from tests.collector.rag_app import running, serve_config
from tests.helpers.rag_traces import (
    ANSWER,
    DOCUMENTS,
    QUERY,
    CollectingSink,
    emit_sdk_rag_trace,
    openinference_retriever,
    rag_trace,
    request_of,
    trace_id,
)

PB = "application/x-protobuf"


@dataclass
class Stack:
    metrics: Metrics
    sink: CollectingSink
    ingest: OtlpIngest
    http: OtlpHttpReceiver
    grpc: OtlpGrpcReceiver

    @property
    def http_url(self) -> str:
        scheme = "https" if self.http.security.tls else "http"
        return f"{scheme}://127.0.0.1:{self.http.port}/v1/traces"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc.port}"

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def make_stack() -> AsyncIterator[Callable[..., Awaitable[Stack]]]:
    stacks: list[Stack] = []

    async def make(*, max_bytes: int = 16 * 1024 * 1024, max_attribute_chars: int = 20_000, **security: str) -> Stack:
        """`security`: receivers settings such as auth_token, tls_cert, tls_key, tls_client_ca."""
        metrics = Metrics()
        sink = CollectingSink()
        settings = IngestSettings(conventions=ConventionConfig(max_attribute_chars=max_attribute_chars),
                                  buffer=AssemblyConfig(quiet_period_s=0.05, answer_wait_s=0.05), flush_interval_s=0.02)
        ingest = OtlpIngest(keep_trace=Sampler(1.0).keep_trace, sink=sink, metrics=metrics, settings=settings)
        await ingest.start()
        config = ReceiversConfig(otlp_http="127.0.0.1:0", otlp_grpc="127.0.0.1:0", max_request_mb=max_bytes / 2**20,
                                 **security)
        http = OtlpHttpReceiver(ingest, metrics=metrics, settings=config.http())
        grpc_receiver = OtlpGrpcReceiver(ingest, metrics=metrics, settings=config.grpc())
        stack = Stack(metrics, sink, ingest, http, grpc_receiver)
        stacks.append(stack)
        await http.start()
        await grpc_receiver.start()
        return stack

    try:
        yield make
    finally:
        for stack in stacks:
            await shutdown(stack.http, 1.0)
            await shutdown(stack.grpc, 1.0)
            await shutdown(stack.ingest, 0.0)


async def send_sdk(exporter: SpanExporter, traces: int = 1) -> list[tuple[str, str]]:
    """Emits RAG traces through the SDK; the export runs on the SDK's own thread, as in an app."""
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    processor = BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("rag-app")
    ids = [emit_sdk_rag_trace(tracer) for _ in range(traces)]
    assert await asyncio.to_thread(processor.force_flush, 10_000)
    await asyncio.to_thread(provider.shutdown)
    return ids


async def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, str]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=body, headers=headers) as response:
            return response.status, await response.read(), response.headers.get("Content-Type", "")


def status_message(body: bytes, content_type: str) -> str:
    if content_type.startswith("application/json"):
        return json.loads(body)["message"]
    return status_pb2.Status.FromString(body).message


async def test_sdk_http_and_grpc_exporters_deliver_retrievals(make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack()
    [(http_trace, http_span)] = await send_sdk(HttpSpanExporter(endpoint=stack.http_url))
    [(grpc_trace, grpc_span)] = await send_sdk(GrpcSpanExporter(endpoint=stack.grpc_target, insecure=True))
    await stack.sink.wait_retrievals(2)
    by_trace = {r.trace_id: r for r in stack.sink.retrievals}
    for trace, span_id in ((http_trace, http_span), (grpc_trace, grpc_span)):
        r = by_trace[trace]
        assert r.span_id == span_id
        assert r.service == "support-bot"
        assert r.query == QUERY
        assert [c.content for c in r.contexts] == DOCUMENTS
        assert r.contexts[0].metadata == {"source": "kb/0.md"}
        assert r.output == ANSWER
    assert stack.value("ctxprec_spans_received_total", receiver="otlp_http") == 3
    assert stack.value("ctxprec_spans_received_total", receiver="otlp_grpc") == 3


async def test_http_bad_input_is_rejected_clearly_and_receiver_keeps_serving(
        make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack(max_bytes=256 * 1024)
    good = request_of(rag_trace(trace_id(True))).SerializeToString()

    status, body, ctype = await post(stack.http_url, good[:-9], {"Content-Type": PB})
    assert status == 400 and ctype.startswith(PB)
    assert "protobuf" in status_message(body, ctype)

    status, body, ctype = await post(stack.http_url, good, {"Content-Type": "text/csv"})
    assert status == 415 and "text/csv" in status_message(body, ctype)

    wrong_types = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab" * 16, "name": 17.5,
                                                                "attributes": "everything"}]}]}]}
    status, body, ctype = await post(stack.http_url, json.dumps(wrong_types).encode(),
                                     {"Content-Type": "application/json"})
    assert status == 400 and ctype.startswith("application/json")
    assert "invalid OTLP/JSON" in status_message(body, ctype)

    status, body, ctype = await post(stack.http_url, b"\0" * (300 * 1024), {"Content-Type": PB})
    assert status == 413 and "limit" in status_message(body, ctype)

    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))
    status, body, ctype = await post(stack.http_url, bomb, {"Content-Type": PB, "Content-Encoding": "gzip"})
    assert status == 413 and "decompressed" in status_message(body, ctype)

    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_http", reason="bad_body") == 2
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_http", reason="unsupported_media_type") == 1
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_http", reason="too_large") == 2
    assert stack.sink.retrievals == []

    # ... and good traffic still goes through, from the SDK and as OTLP/JSON.
    await send_sdk(HttpSpanExporter(endpoint=stack.http_url))
    status, body, ctype = await post(stack.http_url, gzip.compress(good),
                                     {"Content-Type": PB, "Content-Encoding": "gzip"})
    assert status == 200 and ExportTraceServiceResponse.FromString(body) == ExportTraceServiceResponse()
    await stack.sink.wait_retrievals(2)


async def test_http_json_with_an_integer_past_python_limit_is_a_counted_400(
        make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack()
    body = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": ' + b"7" * 4_301 + b"}]}]}]}"
    status, answer, ctype = await post(stack.http_url, body, {"Content-Type": "application/json"})
    assert status == 400 and ctype.startswith("application/json")
    assert "4300 digits" in status_message(answer, ctype)
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_http", reason="bad_body") == 1
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_http", reason="internal") == 0


async def test_http_json_request_gets_a_json_response(make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack()
    trace = trace_id(True)
    doc = {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-bot"}}]},
        "scopeSpans": [{"spans": [{
            "traceId": trace.hex(), "spanId": "00f067aa0ba902b7", "name": "retrieve", "kind": 1,
            "endTimeUnixNano": "2000",
            "attributes": [
                {"key": "openinference.span.kind", "value": {"stringValue": "RETRIEVER"}},
                {"key": "input.value", "value": {"stringValue": "json question"}},
                {"key": "retrieval.documents.0.document.content", "value": {"stringValue": "json doc"}},
            ]}]}]}]}
    status, body, ctype = await post(stack.http_url, json.dumps(doc).encode(), {"Content-Type": "application/json"})
    assert (status, body) == (200, b"{}") and ctype.startswith("application/json")
    await stack.sink.wait_retrievals(1)
    [r] = stack.sink.retrievals
    assert (r.trace_id, r.span_id, r.service, r.query) == (trace.hex(), "00f067aa0ba902b7", "json-bot", "json question")


async def test_hostile_spans_are_bounded(make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack(max_attribute_chars=5_000)
    trace = trace_id(True)
    many = openinference_retriever(trace, b"", [f"context {i}" for i in range(10_000)])
    huge = openinference_retriever(trace_id(True), b"", ["h" * 2_000_000], query="q" * 1_000_000)
    for spans in ([many], [huge]):
        status, _, _ = await post(stack.http_url, request_of(spans).SerializeToString(), {"Content-Type": PB})
        assert status == 200
    await stack.sink.wait_retrievals(2)
    by_trace = {r.trace_id: r for r in stack.sink.retrievals}
    capped = by_trace[trace.hex()]
    assert len(capped.contexts) == 100 and capped.contexts[99].content == "context 99"
    assert stack.value("ctxprec_contexts_dropped_total") == 9_900
    cut = by_trace[huge.trace_id.hex()]
    assert len(cut.contexts[0].content) == 5_000 and len(cut.query) == 5_000


async def test_grpc_bad_input_gets_status_codes_with_messages(make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack(max_bytes=64 * 1024)
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                     request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString)
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await export(b"\x0a\xff\xff\xff\x0f garbage")
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "protobuf" in (bad.value.details() or "")
        big = request_of([openinference_retriever(trace_id(True), b"", ["x" * 100_000])]).SerializeToString()
        with pytest.raises(grpc.aio.AioRpcError) as large:
            await export(big)
        assert large.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "limit" in (large.value.details() or "")
        good = request_of(rag_trace(trace_id(True))).SerializeToString()
        assert await export(good) == ExportTraceServiceResponse()
    await stack.sink.wait_retrievals(1)
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_grpc", reason="bad_body") == 1
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_grpc", reason="too_large") == 1


async def test_bearer_token_on_both_receivers(make_stack: Callable[..., Awaitable[Stack]]) -> None:
    stack = await make_stack(auth_token="s3cret")
    good = request_of(rag_trace(trace_id(True))).SerializeToString()
    status, body, ctype = await post(stack.http_url, good, {"Content-Type": PB})
    assert status == 401 and "bearer token" in status_message(body, ctype)
    status, _, _ = await post(stack.http_url, good, {"Content-Type": PB, "Authorization": "Bearer wrong"})
    assert status == 401
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                     request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString)
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await export(good)
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_http", reason="unauthenticated") == 2
    assert stack.value("ctxprec_receiver_errors_total", receiver="otlp_grpc", reason="unauthenticated") == 1
    assert stack.sink.retrievals == []
    await send_sdk(HttpSpanExporter(endpoint=stack.http_url, headers={"Authorization": "Bearer s3cret"}))
    await send_sdk(GrpcSpanExporter(endpoint=stack.grpc_target, insecure=True,
                                    headers={"authorization": "Bearer s3cret"}))
    await stack.sink.wait_retrievals(2)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tls")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=ctxprec test CA")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", "-extfile", "san.ext")
    return {p.stem + p.suffix.replace(".", "_"): p for p in d.iterdir()}


async def test_tls_and_mutual_tls(make_stack: Callable[..., Awaitable[Stack]], certs: dict[str, Path]) -> None:
    stack = await make_stack(tls_cert=str(certs["server_crt"]), tls_key=str(certs["server_key"]),
                             tls_client_ca=str(certs["ca_crt"]))
    # requests lets REQUESTS_CA_BUNDLE from the environment override the session's CA file.
    session = requests.Session()
    session.trust_env = False
    await send_sdk(HttpSpanExporter(endpoint=stack.http_url, certificate_file=str(certs["ca_crt"]),
                                    client_certificate_file=str(certs["client_crt"]),
                                    client_key_file=str(certs["client_key"]), session=session))
    credentials = grpc.ssl_channel_credentials(certs["ca_crt"].read_bytes(), certs["client_key"].read_bytes(),
                                               certs["client_crt"].read_bytes())
    await send_sdk(GrpcSpanExporter(endpoint=stack.grpc_target, insecure=False, credentials=credentials))
    await stack.sink.wait_retrievals(2)
    # Without a client certificate the TLS handshake itself is refused.
    import ssl

    context = ssl.create_default_context(cafile=str(certs["ca_crt"]))
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.post(stack.http_url, data=b"", headers={"Content-Type": PB}, ssl=context) as response:
                await response.read()


async def test_mutual_tls_from_serve_config(certs: dict[str, Path], tmp_path: Path) -> None:
    """receivers.tls_client_ca in the YAML reaches both receivers of `ctxprec serve`."""
    config_file = tmp_path / "ctxprec.yaml"
    config_file.write_text(f"receivers:\n  tls_cert: {certs['server_crt']}\n  tls_key: {certs['server_key']}\n"
                           f"  tls_client_ca: {certs['ca_crt']}\n")
    config = serve_config("--config", str(config_file))
    assert config.receivers.tls_client_ca == str(certs["ca_crt"])
    async with running(config) as pipeline:
        session = requests.Session()
        session.trust_env = False
        await send_sdk(HttpSpanExporter(endpoint=f"https://127.0.0.1:{pipeline.otlp_http_port}/v1/traces",
                                        certificate_file=str(certs["ca_crt"]),
                                        client_certificate_file=str(certs["client_crt"]),
                                        client_key_file=str(certs["client_key"]), session=session))
        credentials = grpc.ssl_channel_credentials(certs["ca_crt"].read_bytes(), certs["client_key"].read_bytes(),
                                                   certs["client_crt"].read_bytes())
        await send_sdk(GrpcSpanExporter(endpoint=f"127.0.0.1:{pipeline.otlp_grpc_port}", insecure=False,
                                        credentials=credentials))
        received = pipeline.metrics.registry.get_sample_value
        assert received("ctxprec_spans_received_total", {"receiver": "otlp_http"}) == 3
        assert received("ctxprec_spans_received_total", {"receiver": "otlp_grpc"}) == 3
        # TLS with a trusted server but no client certificate: refused in the handshake, on both.
        import ssl

        context = ssl.create_default_context(cafile=str(certs["ca_crt"]))
        async with aiohttp.ClientSession() as client:
            with pytest.raises(aiohttp.ClientError):
                async with client.post(f"https://127.0.0.1:{pipeline.otlp_http_port}/v1/traces", data=b"",
                                       headers={"Content-Type": PB}, ssl=context) as response:
                    await response.read()
        server_only = grpc.ssl_channel_credentials(certs["ca_crt"].read_bytes())
        async with grpc.aio.secure_channel(f"127.0.0.1:{pipeline.otlp_grpc_port}", server_only) as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                         request_serializer=None,
                                         response_deserializer=ExportTraceServiceResponse.FromString)
            with pytest.raises(grpc.aio.AioRpcError):
                await export(b"", timeout=5)
        assert received("ctxprec_spans_received_total", {"receiver": "otlp_grpc"}) == 3


def test_client_ca_needs_a_server_certificate(certs: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="receivers.tls_client_ca"):
        serve_config("--receiver-tls-client-ca", str(certs["ca_crt"]))
    config = serve_config("--receiver-tls-cert", str(certs["server_crt"]), "--receiver-tls-key",
                          str(certs["server_key"]), "--receiver-tls-client-ca", str(certs["ca_crt"]))
    assert config.receivers.tls_client_ca == str(certs["ca_crt"])


def test_security_settings_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="together"):
        ListenerSecurity(tls_cert_file=str(tmp_path / "x.crt"))
    with pytest.raises(ValueError, match="does not exist"):
        ListenerSecurity(tls_cert_file=str(tmp_path / "x.crt"), tls_key_file=str(tmp_path / "x.key"))
    assert ListenerSecurity(bearer_token="t").authorized("bearer t")
    assert not ListenerSecurity(bearer_token="t").authorized("Basic t")
