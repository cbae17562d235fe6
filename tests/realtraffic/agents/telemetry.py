"""The OpenTelemetry SDK set up as an app's own code does it: traces, logs and metrics, each with the
real OTLP/HTTP exporter, pointed at ctxprec by `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporters read it).

The region between the `doc:` markers is docs/INSTRUMENT.md's way to point an app at ctxprec
(tests/docs/test_instrument_doc.py keeps the doc equal to it).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider


@dataclass
class Telemetry:
    tracer_provider: TracerProvider
    logger_provider: LoggerProvider
    meter_provider: MeterProvider

    def shutdown(self) -> None:
        """Flushes every signal (the metric reader exports once more on shutdown)."""
        self.tracer_provider.force_flush()
        self.logger_provider.force_flush()
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()
        self.meter_provider.shutdown()


def setup(service_name: str, processors: Sequence[SpanProcessor] = ()) -> Telemetry:
    """Global tracer, logger and meter providers exporting over OTLP/HTTP. `processors` run before
    the exporting one (OpenInference's span processor for Pydantic AI rewrites spans as they end)."""
    # doc: otlp-setup
    from opentelemetry import _logs, metrics, trace
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # The exporters read OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://ctxprec:4318): traces, logs
    # and metrics all go to ctxprec, which forwards them to its --forward-to.
    resource = Resource.create({"service.name": service_name})
    tracer_provider = TracerProvider(resource=resource)
    for processor in processors:  # e.g. OpenInference's span processor for Pydantic AI
        tracer_provider.add_span_processor(processor)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(tracer_provider)
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    _logs.set_logger_provider(logger_provider)
    meter_provider = MeterProvider(resource=resource,
                                   metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])
    metrics.set_meter_provider(meter_provider)
    # end doc
    return Telemetry(tracer_provider, logger_provider, meter_provider)
