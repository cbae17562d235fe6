"""A synthetic RAG application that sends real OpenTelemetry traces over OTLP.

Used by `ctxprec demo`, the tests, the benchmarks and the docker-compose example. Each request is
one trace of 8 spans: a root span, input guardrail, a RETRIEVER span (OpenInference attributes)
with an embedding and a vector-store child, a prompt span, an LLM span that follows the retriever
under the same root, and an output guardrail. Every service has its own `TracerProvider`
(resource `service.name`) with a `BatchSpanProcessor` and an OTLP exporter (HTTP or gRPC).

Part-way through (after `degrade_after` seconds or `degrade_after_requests` requests) the
retriever of `degrade_service` degrades: relevant documents slide down the ranking or are replaced
by off-topic ones, so context precision falls from about 0.9 to about 0.4.

Two things for the diagnostics to find: a third of the off-topic slots hold one of the service's
planted noisy documents (corpus.NOISY_DOCUMENTS, boilerplate that is never relevant), and
docs-search's retriever returns 6 contexts although the relevant ones are almost always in its
first 3 (the recommended top-k is 3).

    app = SyntheticRagApp(AppConfig(endpoint="http://127.0.0.1:4318", rate=20, duration=10,
                                    degrade_after=5))
    stats = await app.run()        # or app.emit() for one trace; app.shutdown() when done

Command line (the compose example uses it): `python -m ctxprec.collector.demo.synthetic_app --help`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence
from urllib.parse import urlsplit

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from ctxprec.collector.demo.corpus import (
    NOISY_DOCUMENTS,
    SERVICES,
    Document,
    Question,
    off_topic_pool,
    questions_for,
)
from ctxprec.scorer.precision import average_precision

# Retriever name per service: the `retriever` label of the precision metrics.
RETRIEVERS: dict[str, str] = {"support-bot": "kb-vector", "docs-search": "docs-bm25"}
# Contexts each retriever returns. docs-search's returns 6, but ranks 5-6 hold a relevant document
# only LOW_RANK_RELEVANT of the time (and rank 4 never): cutting it to 3 would lose little.
TOP_K: dict[str, int] = {"support-bot": 4, "docs-search": 6}
DEFAULT_TOP_K = 4
LOW_RANK_RELEVANT = 0.03
# Share of off-topic slots filled with one of the service's planted noisy documents.
NOISE_SHARE = 0.35

# Rank patterns (R = relevant document, N = off-topic) with their weights. Healthy MAP averages
# ~0.92 (1.0, 0.83, 0.58); degraded ~0.43 (0.5, 0.42, 0.25, 1.0, 0.0).
HEALTHY_PATTERNS: tuple[tuple[str, float], ...] = (("RRNN", 0.7), ("RNRN", 0.2), ("NRRN", 0.1))
DEGRADED_PATTERNS: tuple[tuple[str, float], ...] = (
    ("NRNN", 0.3), ("NNRR", 0.3), ("NNNR", 0.2), ("RNNN", 0.1), ("NNNN", 0.1))


@dataclass(slots=True)
class AppConfig:
    endpoint: str = "http://127.0.0.1:4318"  # OTLP base URL (or host:port for grpc)
    protocol: str = "http"  # "http" (OTLP/HTTP protobuf) or "grpc"
    rate: float = 10.0  # traces per second, all services together
    duration: float | None = 30.0  # seconds; None runs until `stop` is set
    degrade_after: float | None = None  # seconds after start when the retriever degrades
    degrade_after_requests: int | None = None  # ... or after this many requests (first wins)
    degrade_service: str = "support-bot"
    seed: int = 0
    services: tuple[str, ...] = SERVICES
    export_delay_ms: int = 200  # BatchSpanProcessor schedule delay

    def validate(self) -> None:
        if self.protocol not in ("http", "grpc"):
            raise ValueError(f"protocol must be 'http' or 'grpc', got {self.protocol!r}")
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0 traces/s, got {self.rate!r}")
        if self.duration is not None and self.duration < 0:
            raise ValueError(f"duration must be >= 0 seconds, got {self.duration!r}")
        if not self.services:
            raise ValueError("services must name at least one service")
        for service in self.services:
            questions_for(service)  # raises on an unknown service
        if self.degrade_service not in self.services:
            raise ValueError(f"degrade_service {self.degrade_service!r} is not one of {list(self.services)}")


@dataclass(frozen=True, slots=True)
class EmittedTrace:
    """What one request sent; `expected_precision` is the MAP a faithful judge would give."""

    trace_id: str
    service: str
    retriever: str
    query: str
    answer: str
    contexts: tuple[str, ...]
    relevant: tuple[bool, ...]
    degraded: bool
    document_ids: tuple[str, ...] = ()  # the contexts' `document.id`, in rank order

    @property
    def expected_precision(self) -> float:
        return float(average_precision(self.relevant))


@dataclass(slots=True)
class AppStats:
    sent: dict[str, int] = field(default_factory=dict)  # traces per service
    degraded_sent: int = 0
    degraded_at: float | None = None  # monotonic seconds since start when degradation began


class _SeededIds(IdGenerator):
    """Reproducible trace and span ids (the sidecar samples by trace id)."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def generate_span_id(self) -> int:
        with self._lock:
            return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        with self._lock:
            return self._rng.getrandbits(128) or 1


def _make_exporter(endpoint: str, protocol: str) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        target = endpoint
        if "://" in endpoint:
            parts = urlsplit(endpoint)
            target = parts.netloc
            insecure = parts.scheme in ("http", "grpc")
        else:
            insecure = True
        return GrpcExporter(endpoint=target, insecure=insecure, timeout=5)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    url = endpoint if "://" in endpoint else f"http://{endpoint}"
    if urlsplit(url).path in ("", "/"):
        url = url.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=url, timeout=5)


class SyntheticRagApp:
    def __init__(self, config: AppConfig, *, exporters: dict[str, SpanExporter] | None = None,
                 on_emit: Callable[[EmittedTrace], None] | None = None) -> None:
        """`exporters` (service -> exporter) replaces the OTLP exporters, e.g. to write elsewhere;
        `on_emit` is called with every trace sent (ground truth for callers that compare)."""
        config.validate()
        self.config = config
        self._on_emit = on_emit
        self.stats = AppStats()
        self._rng = random.Random(config.seed)
        self._started = time.monotonic()
        self._requests = 0
        self._providers: dict[str, TracerProvider] = {}
        self._tracers: dict[str, trace_api.Tracer] = {}
        for i, service in enumerate(config.services):
            provider = TracerProvider(
                resource=Resource.create({"service.name": service, "service.version": "1.4.2",
                                          "deployment.environment": "demo"}),
                id_generator=_SeededIds(config.seed * 1000 + i))
            exporter = (exporters or {}).get(service) or _make_exporter(config.endpoint, config.protocol)
            provider.add_span_processor(BatchSpanProcessor(
                exporter, max_queue_size=50_000, max_export_batch_size=512,
                schedule_delay_millis=config.export_delay_ms))
            self._providers[service] = provider
            self._tracers[service] = provider.get_tracer("ctxprec.demo.synthetic_app", "0.1.0")

    # -- degradation --

    @property
    def degraded(self) -> bool:
        return self.stats.degraded_at is not None

    def _check_degrade(self) -> None:
        if self.degraded:
            return
        cfg = self.config
        elapsed = time.monotonic() - self._started
        if ((cfg.degrade_after is not None and elapsed >= cfg.degrade_after)
                or (cfg.degrade_after_requests is not None and self._requests >= cfg.degrade_after_requests)):
            self.stats.degraded_at = elapsed

    # -- one request --

    def emit(self, service: str | None = None) -> EmittedTrace:
        """Send one RAG request's trace (8 spans). Services take turns unless one is named."""
        self._check_degrade()
        if service is None:
            service = self.config.services[self._requests % len(self.config.services)]
        elif service not in self._tracers:
            raise ValueError(f"unknown service {service!r}; this app runs {list(self._tracers)}")
        self._requests += 1
        degraded = self.degraded and service == self.config.degrade_service
        question = self._rng.choice(questions_for(service))
        docs, relevant = self._retrieve(question, degraded, service)
        trace_id = self._send(service, question, docs)
        sent = EmittedTrace(trace_id=trace_id, service=service, retriever=RETRIEVERS.get(service, "default"),
                            query=question.query, answer=question.answer,
                            contexts=tuple(d.content for d in docs), relevant=relevant, degraded=degraded,
                            document_ids=tuple(d.id for d in docs))
        self.stats.sent[service] = self.stats.sent.get(service, 0) + 1
        self.stats.degraded_sent += degraded
        if self._on_emit is not None:
            self._on_emit(sent)
        return sent

    def _retrieve(self, question: Question, degraded: bool,
                  service: str) -> tuple[list[Document], tuple[bool, ...]]:
        rng = self._rng
        patterns = DEGRADED_PATTERNS if degraded else HEALTHY_PATTERNS
        k = TOP_K.get(service, DEFAULT_TOP_K)
        slots = list(rng.choices([p for p, _ in patterns], weights=[w for _, w in patterns])[0].ljust(k, "N")[:k])
        if k > 4 and "R" in slots[:4] and rng.random() < LOW_RANK_RELEVANT:
            # Now and then a relevant document ranked below 4: why the recommended k keeps 95%, not all.
            high, low = 3 - slots[3::-1].index("R"), rng.randrange(4, k)
            slots[high], slots[low] = slots[low], slots[high]
        relevant_docs = list(question.relevant)
        rng.shuffle(relevant_docs)
        off_topic = rng.sample(off_topic_pool(question), slots.count("N"))
        noisy = list(NOISY_DOCUMENTS.get(service, ()))
        docs = []
        for slot in slots:
            if slot == "R":
                docs.append(relevant_docs.pop())
            elif noisy and rng.random() < NOISE_SHARE:
                docs.append(noisy.pop(rng.randrange(len(noisy))))  # each at most once per retrieval
                off_topic.pop()
            else:
                docs.append(off_topic.pop())
        return docs, tuple(slot == "R" for slot in slots)

    def _send(self, service: str, question: Question, docs: list[Document]) -> str:
        tracer = self._tracers[service]
        retriever = RETRIEVERS.get(service, "default")
        rng = self._rng
        # Spans get synthetic timestamps ending now, so no request ever sleeps.
        durations_ms = [rng.uniform(2, 6), rng.uniform(8, 20), rng.uniform(3, 8), rng.uniform(4, 12),
                        rng.uniform(1, 3), rng.uniform(300, 900), rng.uniform(2, 6)]
        total_ns = int((sum(durations_ms) + 2) * 1e6)
        now = time.time_ns()
        cursor = now - total_ns
        root = tracer.start_span("rag.request", kind=trace_api.SpanKind.SERVER, start_time=cursor, attributes={
            "openinference.span.kind": "CHAIN", "input.value": question.query, "output.value": question.answer,
            "http.request.method": "POST", "http.route": "/ask", "session.id": f"s-{rng.randrange(10_000)}"})
        parent = trace_api.set_span_in_context(root)
        cursor += int(1e6)

        def child(name: str, ms: float, attributes: dict, context=parent) -> trace_api.Span:
            nonlocal cursor
            span = tracer.start_span(name, context=context, start_time=cursor, attributes=attributes)
            cursor += int(ms * 1e6)
            return span

        child("guardrail.input", durations_ms[0], {"openinference.span.kind": "GUARDRAIL",
                                                    "input.value": question.query}).end(end_time=cursor)
        retrieve_start = cursor
        retrieval_attrs: dict[str, object] = {
            "openinference.span.kind": "RETRIEVER", "input.value": question.query, "retriever": retriever,
            "retrieval.top_k": len(docs)}
        for i, doc in enumerate(docs):
            prefix = f"retrieval.documents.{i}.document"
            retrieval_attrs[f"{prefix}.content"] = doc.content
            retrieval_attrs[f"{prefix}.id"] = doc.id
            retrieval_attrs[f"{prefix}.score"] = round(0.95 - 0.07 * i - rng.uniform(0, 0.03), 4)
            retrieval_attrs[f"{prefix}.metadata"] = json.dumps({"topic": doc.topic})
        retriever_span = tracer.start_span(retriever, context=parent, start_time=retrieve_start,
                                           attributes=retrieval_attrs)
        inner = trace_api.set_span_in_context(retriever_span)
        child("embed.query", durations_ms[1] * 0.4, {"openinference.span.kind": "EMBEDDING",
                                                     "embedding.model_name": "text-embedding-3-small"},
              context=inner).end(end_time=cursor)
        child("vector_store.search", durations_ms[1] * 0.6, {"db.system": "qdrant", "db.operation.name": "search",
                                                             "db.collection.name": service},
              context=inner).end(end_time=cursor)
        retriever_span.end(end_time=cursor)
        child("prompt.render", durations_ms[2], {"openinference.span.kind": "CHAIN",
                                                 "prompt.template.version": "v3"}).end(end_time=cursor)
        prompt = f"Answer from the context.\nQuestion: {question.query}"
        child("llm.generate", durations_ms[5], {
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini", "llm.provider": "openai",
            "input.value": prompt, "output.value": question.answer,
            "llm.token_count.prompt": 120 + 30 * len(docs), "llm.token_count.completion": len(question.answer) // 4,
        }).end(end_time=cursor)
        child("guardrail.output", durations_ms[6], {"openinference.span.kind": "GUARDRAIL",
                                                     "output.value": question.answer}).end(end_time=cursor)
        root.end(end_time=max(cursor + int(1e6), now))
        return format(root.get_span_context().trace_id, "032x")

    # -- the request loop --

    async def run(self, stop: asyncio.Event | None = None) -> AppStats:
        """Send traces at `rate` until `duration` passes or `stop` is set; flushes before returning."""
        cfg = self.config
        interval = 1.0 / cfg.rate
        self._started = time.monotonic()
        next_at = self._started
        deadline = None if cfg.duration is None else self._started + cfg.duration
        while not (stop is not None and stop.is_set()):
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            # Catch up in bursts when the loop falls behind, but never more than a second's worth.
            behind = min(int((now - next_at) / interval) + 1, max(1, int(cfg.rate)))
            for _ in range(behind):
                self.emit()
            next_at = max(next_at + behind * interval, now - 1.0)
            delay = next_at - time.monotonic()
            if delay > 0:
                if stop is None:
                    await asyncio.sleep(delay)
                else:
                    try:
                        await asyncio.wait_for(stop.wait(), delay)
                    except asyncio.TimeoutError:
                        pass
            else:
                await asyncio.sleep(0)
        await asyncio.to_thread(self.flush)
        return self.stats

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export every span ended so far; True when all providers flushed in time."""
        return all(p.force_flush(int(timeout_s * 1000)) for p in self._providers.values())

    def shutdown(self) -> None:
        for provider in self._providers.values():
            provider.shutdown()


def _parse(argv: Sequence[str] | None) -> AppConfig:
    parser = argparse.ArgumentParser(prog="python -m ctxprec.collector.demo.synthetic_app",
                                     description="Send synthetic RAG traces over OTLP.")
    parser.add_argument("--endpoint", default="http://127.0.0.1:4318", help="OTLP endpoint (default %(default)s)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--rate", type=float, default=5.0, help="traces per second (default %(default)s)")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds; 0 runs until interrupted")
    parser.add_argument("--degrade-after", type=float, default=None, help="seconds before the retriever degrades")
    parser.add_argument("--degrade-after-requests", type=int, default=None)
    parser.add_argument("--degrade-service", default="support-bot")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = AppConfig(endpoint=args.endpoint, protocol=args.protocol, rate=args.rate,
                       duration=args.duration or None, degrade_after=args.degrade_after,
                       degrade_after_requests=args.degrade_after_requests,
                       degrade_service=args.degrade_service, seed=args.seed)
    try:
        config.validate()
    except ValueError as exc:
        parser.error(str(exc))
    return config


def main(argv: Sequence[str] | None = None) -> int:
    app = SyntheticRagApp(_parse(argv))
    try:
        asyncio.run(app.run())
    except KeyboardInterrupt:
        pass
    finally:
        app.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
