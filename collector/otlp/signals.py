"""The three OTLP signals, named once: for each, its export request and response messages, its
OTLP/HTTP path and OTLP/gRPC service, and how many items (spans, log records, metric data
points) a request holds. The receivers take all three and the forwarder sends all three, by
these names.

Counting an item is reading the repeated fields above it, never the item itself: a metrics
request's data points are counted per metric (`len`), a logs request's records per scope.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

TRACES, LOGS, METRICS = "traces", "logs", "metrics"
# The one-of fields of a Metric that hold data points.
_METRIC_DATA = ("gauge", "sum", "histogram", "exponential_histogram", "summary")


def _spans(request: Any) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def _log_records(request: Any) -> int:
    return sum(len(sl.log_records) for rl in request.resource_logs for sl in rl.scope_logs)


def _data_points(request: Any) -> int:
    total = 0
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                if kind in _METRIC_DATA:
                    total += len(getattr(metric, kind).data_points)
    return total


@dataclass(frozen=True, slots=True)
class Signal:
    name: str  # traces | logs | metrics
    items: str  # what one item is called in messages: spans, log records, data points
    http_path: str
    grpc_service: str
    request: type
    response: type
    count: Callable[[Any], int]  # items in a decoded request
    # OTLP/JSON: where the lists are, outermost first, and the id fields of an item (hex in JSON).
    json_lists: tuple[tuple[str, str], ...]

    @property
    def grpc_method(self) -> str:
        return f"/{self.grpc_service}/Export"


SIGNALS: dict[str, Signal] = {
    TRACES: Signal(TRACES, "spans", "/v1/traces", "opentelemetry.proto.collector.trace.v1.TraceService",
                   ExportTraceServiceRequest, ExportTraceServiceResponse, _spans,
                   (("resourceSpans", "resource_spans"), ("scopeSpans", "scope_spans"), ("spans", "spans"))),
    LOGS: Signal(LOGS, "log records", "/v1/logs", "opentelemetry.proto.collector.logs.v1.LogsService",
                 ExportLogsServiceRequest, ExportLogsServiceResponse, _log_records,
                 (("resourceLogs", "resource_logs"), ("scopeLogs", "scope_logs"), ("logRecords", "log_records"))),
    METRICS: Signal(METRICS, "data points", "/v1/metrics", "opentelemetry.proto.collector.metrics.v1.MetricsService",
                    ExportMetricsServiceRequest, ExportMetricsServiceResponse, _data_points,
                    (("resourceMetrics", "resource_metrics"), ("scopeMetrics", "scope_metrics"),
                     ("metrics", "metrics"))),
}
