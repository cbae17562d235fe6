"""OTLP logs and metrics made by the real OpenTelemetry SDK, for tests and benchmarks.

`emit_logs` and `emit_metrics` run the SDK's own providers and batch processors into the exporter
given (any of the SDK's OTLP exporters, HTTP or gRPC), as an app does; `logs_request` and
`metrics_request` give an export request as the SDK's OTLP encoder writes it, for tests that
post bytes themselves.
"""
from __future__ import annotations

from typing import Any

from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    InMemoryLogRecordExporter,
    LogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

SERVICE = "signals-app"


def _logger_provider(service: str) -> LoggerProvider:
    return LoggerProvider(resource=Resource.create({"service.name": service}))


def _write_logs(provider: LoggerProvider, count: int, prefix: str) -> list[str]:
    logger = provider.get_logger("signals-app.logs")
    bodies = [f"{prefix} {i}" for i in range(count)]
    for i, body in enumerate(bodies):
        logger.emit(body=body, severity_number=SeverityNumber.INFO, severity_text="INFO",
                    attributes={"app.line": i}, event_name="app.line" if i % 2 else None)
    return bodies


def emit_logs(exporter: LogRecordExporter, count: int = 5, *, prefix: str = "log line",
              service: str = SERVICE) -> list[str]:
    """`count` log records through a batch processor into `exporter`; returns their bodies."""
    provider = _logger_provider(service)
    processor = BatchLogRecordProcessor(exporter)
    provider.add_log_record_processor(processor)
    bodies = _write_logs(provider, count, prefix)
    assert processor.force_flush(10_000)
    provider.shutdown()
    return bodies


def _write_metrics(provider: MeterProvider, prefix: str) -> dict[str, Any]:
    meter = provider.get_meter("signals-app.metrics")
    requests = meter.create_counter(f"{prefix}.requests")
    latency = meter.create_histogram(f"{prefix}.latency", unit="ms")
    for route in ("/ask", "/health"):
        requests.add(3, {"route": route})
        latency.record(12.5, {"route": route})
    return {f"{prefix}.requests": 2, f"{prefix}.latency": 2}  # metric name -> data points


def emit_metrics(exporter: MetricExporter, *, prefix: str = "app", service: str = SERVICE) -> dict[str, int]:
    """A counter and a histogram, two data points each, exported once; returns name -> points."""
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": service}))
    points = _write_metrics(provider, prefix)
    provider.shutdown()  # collects and exports once
    return points


def logs_request(count: int = 5, *, prefix: str = "log line", service: str = SERVICE) -> Any:
    """An `ExportLogsServiceRequest` of `count` records, as the SDK's OTLP encoder writes it."""
    provider = _logger_provider(service)
    memory = InMemoryLogRecordExporter()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    _write_logs(provider, count, prefix)
    provider.shutdown()
    return encode_logs(memory.get_finished_logs())


def metrics_request(*, prefix: str = "app", service: str = SERVICE) -> Any:
    """An `ExportMetricsServiceRequest` (two metrics, two data points each), as the SDK encodes it."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": service}))
    _write_metrics(provider, prefix)
    data = reader.get_metrics_data()
    provider.shutdown()
    assert data is not None
    return encode_metrics(data)
