"""A small RAG "application" for end-to-end tests: it emits real traces with the OpenTelemetry SDK
and its OTLP exporters (gRPC or HTTP), in the OpenInference, OTel GenAI and OpenLLMetry
conventions, and a helper that runs `ctxprec serve` in-process."""
from __future__ import annotations

import argparse
import asyncio
import json
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

from ctxprec.collector import config as config_module
from ctxprec.collector.pipeline import Pipeline
from ctxprec.collector.serve import serve
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Tracer
from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Emitted:
    trace_id: str
    retriever_span_id: str
    convention: str


class RagApp:
    def __init__(self, *, protocol: str, port: int, service: str = "support-bot",
                 id_generator: IdGenerator | None = None) -> None:
        """`id_generator` picks the trace ids (the sidecar samples by them)."""
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter,
            )

            exporter: Any = OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True)
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter as HttpExporter,
            )

            exporter = HttpExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}), id_generator=id_generator)
        # Batch: the SDK exporters block, and the sidecar under test shares this event loop.
        self.provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
        self.tracer: Tracer = self.provider.get_tracer("rag-app")

    async def flush(self) -> None:
        assert await asyncio.to_thread(self.provider.force_flush, 10_000)

    async def close(self) -> None:
        await asyncio.to_thread(self.provider.shutdown)

    def openinference(self, query: str, docs: list[str], answer: str, retriever: str = "kb-v2",
                      ids: list[str] | None = None, attributes: dict[str, Any] | None = None) -> Emitted:
        """`ids`: the documents' ids (default doc-<rank>); `attributes`: more on the retrieval span."""
        with self.tracer.start_as_current_span("rag-request", attributes={"input.value": query}) as root:
            with self.tracer.start_as_current_span(retriever, attributes=attributes) as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                span.set_attribute("input.value", query)
                for i, doc in enumerate(docs):
                    span.set_attribute(f"retrieval.documents.{i}.document.content", doc)
                    span.set_attribute(f"retrieval.documents.{i}.document.id", ids[i] if ids else f"doc-{i}")
                    span.set_attribute(f"retrieval.documents.{i}.document.score", 1.0 - i / 10)
                retrieval = span.get_span_context()
            with self.tracer.start_as_current_span("llm") as llm:
                llm.set_attribute("openinference.span.kind", "LLM")
                llm.set_attribute("output.value", answer)
            root.set_attribute("output.value", answer)
        return Emitted(f"{retrieval.trace_id:032x}", f"{retrieval.span_id:016x}", "openinference")

    def genai(self, query: str, docs: list[str], answer: str) -> Emitted:
        with self.tracer.start_as_current_span("chat-with-docs"):
            with self.tracer.start_as_current_span("retrieval kb") as span:
                span.set_attribute("gen_ai.operation.name", "retrieval")
                span.set_attribute("gen_ai.retrieval.query.text", query)
                span.set_attribute("gen_ai.retrieval.documents",
                                   json.dumps([{"id": f"d{i}", "content": d} for i, d in enumerate(docs)]))
                retrieval = span.get_span_context()
            with self.tracer.start_as_current_span("chat gpt") as llm:
                llm.set_attribute("gen_ai.operation.name", "chat")
                llm.set_attribute("gen_ai.output.messages", json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]))
        return Emitted(f"{retrieval.trace_id:032x}", f"{retrieval.span_id:016x}", "genai")

    def genai_v140(self, query: str, docs: list[str], answer: str, *, content: bool = True) -> Emitted:
        """A retrieval span as an app writes it with the GenAI conventions v1.40: the documents as
        a structured attribute (a list of maps; the SDK sends an array of kvlists), each with
        `id` and `score`, and `content` only when content capture is on."""
        with self.tracer.start_as_current_span("answer-question"):
            with self.tracer.start_as_current_span("retrieval kb-v140") as span:
                span.set_attribute("gen_ai.operation.name", "retrieval")
                span.set_attribute("gen_ai.retrieval.query.text", query)
                span.set_attribute("gen_ai.retrieval.documents", [  # type: ignore[arg-type]
                    {"id": f"d{i}", "score": round(1.0 - i / 10, 2), **({"content": d} if content else {})}
                    for i, d in enumerate(docs)])
                retrieval = span.get_span_context()
            with self.tracer.start_as_current_span("chat gpt") as llm:
                llm.set_attribute("gen_ai.operation.name", "chat")
                if content:
                    llm.set_attribute("gen_ai.input.messages", json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": "\n".join([*docs, query])}]}]))
                    llm.set_attribute("gen_ai.output.messages", json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]))
        return Emitted(f"{retrieval.trace_id:032x}", f"{retrieval.span_id:016x}", "genai")

    def openllmetry(self, query: str, docs: list[str], answer: str) -> Emitted:
        with self.tracer.start_as_current_span("workflow"):
            with self.tracer.start_as_current_span("vectorstore.query") as span:
                span.set_attribute("db.query.text", query)
                for doc in docs:
                    span.add_event("db.query.result", {"db.query.result.document": doc})
                retrieval = span.get_span_context()
            with self.tracer.start_as_current_span("openai.chat") as llm:
                llm.set_attribute("gen_ai.completion.0.role", "assistant")
                llm.set_attribute("gen_ai.completion.0.content", answer)
        return Emitted(f"{retrieval.trace_id:032x}", f"{retrieval.span_id:016x}", "openllmetry")


def serve_config(*flags: str) -> config_module.ServeConfig:
    parser = argparse.ArgumentParser()
    config_module.add_arguments(parser)
    base = ["--otlp-grpc", "127.0.0.1:0", "--otlp-http", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
            "--quiet-period", "0.2", "--max-wait", "5", "--shutdown-timeout", "5"]
    return config_module.load(parser.parse_args(base + list(flags)), environ={})


@asynccontextmanager
async def running(config: config_module.ServeConfig) -> AsyncIterator[Pipeline]:
    """`ctxprec serve` in this event loop, stopped (gracefully) on exit."""
    ready, stop = asyncio.Event(), asyncio.Event()
    started: list[Pipeline] = []
    task = asyncio.create_task(serve(config, ready=ready, stop=stop, on_start=started.append))
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.is_set():
        waiter.cancel()
        await task  # raises what made start fail
    try:
        yield started[0]
    finally:
        stop.set()
        await task


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> {(sample name, sorted labels): value}."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def wait_until(predicate: Any, timeout: float = 20.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
