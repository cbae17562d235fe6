"""An app that exports traces, logs and metrics the way the OpenTelemetry SDK's own setup does:
one provider per signal, each with the OTLP exporter that reads `OTEL_EXPORTER_OTLP_ENDPOINT`
(HTTP, or gRPC when `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`). Run in its own process:

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 .venv/bin/python -m tests.collector.signals_app --out sent.json

It writes what it sent to `--out`: each log record as the SDK encoded it (hex of the serialized
`LogRecord`), each metric's data points, and the RAG traces' ids, so that a test can check what
arrived downstream against it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.helpers.rag_traces import emit_sdk_rag_trace

DOCUMENTS = ["[relevant] Reset it under Settings > Security.", "[irrelevant] Our pricing plans."]


def exporters() -> tuple[object, object, object]:
    if os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter  # type: ignore[assignment]
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter  # type: ignore[assignment]
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
    return OTLPSpanExporter(), OTLPLogExporter(), OTLPMetricExporter()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--traces", type=int, default=2)
    parser.add_argument("--logs", type=int, default=20)
    parser.add_argument("--service-name", default="signals-app")
    args = parser.parse_args(argv)
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        parser.error("set OTEL_EXPORTER_OTLP_ENDPOINT")
    span_exporter, log_exporter, metric_exporter = exporters()
    resource = Resource.create({"service.name": args.service_name})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
    kept = InMemoryLogRecordExporter()  # what was sent, as the exporter encodes it
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(kept))
    meter_provider = MeterProvider(resource=resource, metric_readers=[
        PeriodicExportingMetricReader(metric_exporter, export_interval_millis=3_600_000)])

    tracer = tracer_provider.get_tracer("signals-app")
    logger = logger_provider.get_logger("signals-app")
    requests = meter_provider.get_meter("signals-app").create_counter("app.requests")
    traces = []
    for i in range(args.traces):
        with tracer.start_as_current_span("request"):
            logger.emit(body=f"handling request {i}", severity_number=SeverityNumber.INFO, attributes={"request": i})
        traces.append(emit_sdk_rag_trace(tracer, documents=DOCUMENTS))
        requests.add(1, {"route": "/ask"})
    for i in range(args.logs):
        logger.emit(body=f"log line {i}", severity_number=SeverityNumber.WARN, attributes={"line": i})
        requests.add(1, {"route": f"/page/{i % 3}"})

    tracer_provider.shutdown()
    logger_provider.shutdown()
    meter_provider.shutdown()  # exports the metrics once
    records = [record for rl in encode_logs(kept.get_finished_logs()).resource_logs
               for sl in rl.scope_logs for record in sl.log_records]
    args.out.write_text(json.dumps({
        "traces": traces,
        "log_records": [record.SerializeToString().hex() for record in records],
        "metrics": {"app.requests": {"/ask": args.traces, **{f"/page/{r}": len(range(r, args.logs, 3))
                                                           for r in range(min(3, args.logs))}}},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
