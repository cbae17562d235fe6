"""Run one framework app, instrumented by one real instrumentor, and export its spans over OTLP/HTTP.

    python -m tests.realtraffic.apps.runner --framework langchain --instrumentor openinference \
        --shape direct --endpoint http://127.0.0.1:4318/v1/traces --service-name rag --out result.json

Run each combination in its own process: instrumentors patch framework classes globally.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from .corpus import QUESTIONS, RunResult

FRAMEWORKS = ("langchain", "llamaindex", "haystack")
INSTRUMENTORS = ("openinference", "openllmetry")
SHAPES = ("direct", "asgi", "sequential")
PROJECT_NAME_KEY = "openinference.project.name"


class RagApp(Protocol):
    def run_direct(self, question: str) -> RunResult: ...

    def run_sequential(self, question: str) -> RunResult: ...


class _ExportTally(SpanExporter):
    """Wraps the OTLP exporter so the run can fail loudly when spans did not reach the receiver."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def make_provider(service_name: str, project: str | None,
                  endpoints: Sequence[str]) -> tuple[TracerProvider, list[_ExportTally]]:
    """One batch processor per endpoint: an app that sends to a backend and to ctxprec at once."""
    attributes: dict[str, Any] = {"service.name": service_name}
    if project:
        attributes[PROJECT_NAME_KEY] = project
    provider = TracerProvider(resource=Resource.create(attributes))
    tallies = [_ExportTally(OTLPSpanExporter(endpoint=endpoint)) for endpoint in endpoints]
    for tally in tallies:
        provider.add_span_processor(BatchSpanProcessor(tally, schedule_delay_millis=100))
    trace.set_tracer_provider(provider)
    return provider, tallies


def build(framework: str, instrumentor: str, provider: TracerProvider, llm: str | None,
          rerank: bool = False) -> RagApp:
    # Instrument before building: some instrumentors patch classes as they are registered.
    if framework == "langchain":
        from . import langchain_app

        if llm not in (None, "canned"):
            raise ValueError("langchain only has the canned FakeListChatModel")
        langchain_app.instrument(instrumentor, provider)
        return langchain_app.build_app()
    if framework == "llamaindex":
        from . import llamaindex_app

        llamaindex_app.instrument(instrumentor, provider)
        return llamaindex_app.build_app(llm or "canned", rerank)  # type: ignore[arg-type]
    if framework == "haystack":
        from . import haystack_app

        haystack_app.instrument(instrumentor, provider)
        # OpenLLMetry traces only Haystack's OpenAI generators, so it gets the mocked one.
        kind = llm or ("openai" if instrumentor == "openllmetry" else "canned")
        return haystack_app.build_app(kind)  # type: ignore[arg-type]
    raise ValueError(f"unknown framework {framework}")


def run_direct(app: RagApp) -> list[RunResult]:
    return [app.run_direct(q.text) for q in QUESTIONS]


def run_sequential(app: RagApp, provider: TracerProvider) -> list[RunResult]:
    tracer = provider.get_tracer("ctxprec.realtraffic.app")
    results = []
    for q in QUESTIONS:
        with tracer.start_as_current_span("handle_question") as span:
            span.set_attribute("app.question", q.text)
            results.append(app.run_sequential(q.text))
    return results


def run_asgi(app: RagApp, provider: TracerProvider) -> list[RunResult]:
    import httpx
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def ask(request: Request) -> JSONResponse:
        question = (await request.json())["question"]
        # The frameworks' calls are synchronous; run them off the event loop as a real
        # server would. The thread inherits the request's context, so spans nest under it.
        result = await run_in_threadpool(app.run_direct, question)
        return JSONResponse(asdict(result))

    asgi_app = OpenTelemetryMiddleware(
        Starlette(routes=[Route("/ask", ask, methods=["POST"])]), tracer_provider=provider
    )

    async def call_all() -> list[RunResult]:
        transport = httpx.ASGITransport(app=asgi_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rag.test") as client:
            results = []
            for q in QUESTIONS:
                response = await client.post("/ask", json={"question": q.text})
                response.raise_for_status()
                results.append(RunResult(**response.json()))
            return results

    return asyncio.run(call_all())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--framework", required=True, choices=FRAMEWORKS)
    parser.add_argument("--instrumentor", required=True, choices=INSTRUMENTORS)
    parser.add_argument("--shape", required=True, choices=SHAPES)
    parser.add_argument("--endpoint", required=True, action="append",
                        help="OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces (repeatable)")
    parser.add_argument("--service-name", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--project", default=None, help=f"sets the {PROJECT_NAME_KEY} resource attribute")
    parser.add_argument(
        "--llm",
        choices=("canned", "openai"),
        default=None,
        help="llamaindex/haystack: a canned model, or the framework's real OpenAI class over a mock "
        "transport (default: canned; haystack with openllmetry defaults to openai)",
    )
    parser.add_argument("--rerank", action="store_true",
                        help="llamaindex: LLMRerank after the retriever (top 3 -> 2, a new order)")
    args = parser.parse_args(argv)
    if args.rerank and args.framework != "llamaindex":
        parser.error("--rerank: llamaindex only")

    provider, tallies = make_provider(args.service_name, args.project, args.endpoint)
    app = build(args.framework, args.instrumentor, provider, args.llm, args.rerank)
    if args.shape == "direct":
        runs = run_direct(app)
    elif args.shape == "sequential":
        runs = run_sequential(app, provider)
    else:
        runs = run_asgi(app, provider)
    return finish(provider, tallies, args.endpoint, args.out, args.framework, args.instrumentor, args.shape, runs)


def finish(provider: TracerProvider, tallies: Sequence[_ExportTally], endpoints: Sequence[str], out: Path,
           framework: str, instrumentor: str, shape: str, runs: Sequence[RunResult]) -> int:
    """Flushes the spans, writes the report to `out`; 1 if no span reached an endpoint."""
    provider.force_flush()
    provider.shutdown()
    report = {"framework": framework, "instrumentor": instrumentor, "shape": shape, "runs": [asdict(r) for r in runs]}
    out.write_text(json.dumps(report, indent=2) + "\n")
    status = 0
    for endpoint, tally in zip(endpoints, tallies):
        if tally.failed or not tally.exported:
            print(f"span export to {endpoint} failed: {tally.exported} exported, {tally.failed} failed",
                  file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
