"""`evaluator` write-back (SPEC.md section 6): scores go out of band, because ended spans cannot
change. For each `evaluated` or `failed` outcome this exporter emits, with the OpenTelemetry SDK:

- a span `openinference.span.kind = EVALUATOR` in the scored trace (its parent is the scored span,
  rebuilt as a remote span context from the trace and span ids), with a Span Link to the scored
  span and the same attributes the span write-back mode would add;
- a log record with event name `gen_ai.evaluation.result`, tied to the scored span's context.

Both go to `--forward-to` through OTLP exporters (gRPC for grpc:// and grpcs://, HTTP/protobuf for
http:// and https://) behind batch processors, so `emit` never blocks the scoring workers.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision
from ctxprec.collector.version import VERSION

if TYPE_CHECKING:
    from ctxprec.collector.scoring.workers import ScoreOutcome

log = logging.getLogger(__name__)

EXPORTER = "evaluator"
EVENT_NAME = "gen_ai.evaluation.result"
SPAN_NAME = "context_precision evaluation"
# The log record carries the GenAI evaluation fields; the span carries everything.
_EVENT_KEYS = ("gen_ai.evaluation.name", "gen_ai.evaluation.score.value", "gen_ai.evaluation.score.label",
               "gen_ai.evaluation.explanation", "error.type")


def otlp_endpoints(url: str) -> tuple[str, str, str, bool]:
    """(protocol, traces endpoint, logs endpoint, insecure) for `--forward-to`."""
    parts = urlsplit(url)
    if parts.scheme in ("grpc", "grpcs"):
        return "grpc", parts.netloc, parts.netloc, parts.scheme == "grpc"
    path = parts.path.rstrip("/")
    if not path:
        traces, logs = "/v1/traces", "/v1/logs"
    elif path.endswith("/v1/traces"):
        traces, logs = path, path[: -len("/v1/traces")] + "/v1/logs"
    else:  # a collector behind a path prefix
        traces, logs = path + "/v1/traces", path + "/v1/logs"
    build = lambda p: urlunsplit((parts.scheme, parts.netloc, p, "", ""))  # noqa: E731
    return "http", build(traces), build(logs), parts.scheme == "http"


class EvaluatorExporter:
    """A `ResultSink`."""

    def __init__(self, url: str, *, metrics: Metrics | None = None, service_name: str = "ctxprec",
                 ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None,
                 schedule_delay_ms: int = 200, version: str = VERSION) -> None:
        self.url = url
        self.metrics = metrics
        protocol, traces_endpoint, logs_endpoint, insecure = otlp_endpoints(url)
        span_exporter, log_exporter = _exporters(protocol, traces_endpoint, logs_endpoint, insecure,
                                                 ca_file, cert_file, key_file)
        resource = Resource.create({"service.name": service_name, "service.version": version})
        self._tracer_provider = TracerProvider(resource=resource)
        self._tracer_provider.add_span_processor(
            BatchSpanProcessor(span_exporter, schedule_delay_millis=schedule_delay_ms))
        self._logger_provider = LoggerProvider(resource=resource)
        self._logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(log_exporter, schedule_delay_millis=schedule_delay_ms))
        self._tracer = self._tracer_provider.get_tracer("ctxprec.evaluator", version)
        self._logger = self._logger_provider.get_logger("ctxprec.evaluator", version)
        self.emitted = 0

    def emit(self, outcome: "ScoreOutcome") -> None:
        if outcome.attributes is None or outcome.decision not in (Decision.EVALUATED, Decision.FAILED):
            return
        r = outcome.retrieval
        try:
            scored = SpanContext(trace_id=int(r.trace_id, 16), span_id=int(r.span_id, 16), is_remote=True,
                                 trace_flags=TraceFlags(TraceFlags.SAMPLED))
        except ValueError:
            # rag_event ids need not be OTel ids; there is no trace to attach the evaluation to.
            self._count("dropped_invalid_ids")
            return
        if not scored.is_valid:
            self._count("dropped_invalid_ids")
            return
        parent = trace.set_span_in_context(NonRecordingSpan(scored))
        attributes: dict[str, Any] = {"openinference.span.kind": "EVALUATOR", **outcome.attributes}
        timestamp = int(outcome.scored_at * 1e9)
        span = self._tracer.start_span(SPAN_NAME, context=parent, kind=SpanKind.INTERNAL,
                                       links=[Link(scored, {"ctxprec.link": "scored_span"})],
                                       attributes=attributes, start_time=timestamp)
        if outcome.decision is Decision.FAILED:
            span.set_status(Status(StatusCode.ERROR, outcome.error[1] if outcome.error else "scoring failed"))
        span.end(end_time=timestamp)

        event_attributes = {k: outcome.attributes[k] for k in _EVENT_KEYS if k in outcome.attributes}
        event_attributes["ctxprec.record_id"] = str(outcome.record.get("id", ""))
        self._logger.emit(timestamp=timestamp, context=parent, event_name=EVENT_NAME,
                          body=outcome.attributes.get("gen_ai.evaluation.explanation")
                          or (outcome.error[1] if outcome.error else None),
                          attributes=event_attributes)
        self.emitted += 1
        self._count("ok")

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.exported_spans.labels(exporter=EXPORTER, outcome=outcome).inc()

    def _flush_and_shutdown(self, timeout_s: float) -> None:
        millis = int(timeout_s * 1000)
        self._tracer_provider.force_flush(millis)
        self._logger_provider.force_flush(millis)
        self._tracer_provider.shutdown()
        self._logger_provider.shutdown()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Flush what was emitted, then stop (the SDK's flush blocks: done off the event loop)."""
        await asyncio.to_thread(self._flush_and_shutdown, timeout_s)


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _exporters(protocol: str, traces_endpoint: str, logs_endpoint: str, insecure: bool, ca_file: str | None,
               cert_file: str | None, key_file: str | None) -> tuple[Any, Any]:
    if protocol == "grpc":
        import grpc
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        credentials = None
        if not insecure:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(ca_file), private_key=_read(key_file), certificate_chain=_read(cert_file))
        return (OTLPSpanExporter(endpoint=traces_endpoint, insecure=insecure, credentials=credentials),
                OTLPLogExporter(endpoint=logs_endpoint, insecure=insecure, credentials=credentials))
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

    tls = {"certificate_file": ca_file, "client_certificate_file": cert_file, "client_key_file": key_file}
    tls = {k: v for k, v in tls.items() if v is not None}
    return HttpSpanExporter(endpoint=traces_endpoint, **tls), HttpLogExporter(endpoint=logs_endpoint, **tls)
