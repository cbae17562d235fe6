"""`evaluator` write-back: scores go out of band, because ended spans cannot change.

For each `evaluated` or `failed` outcome this exporter writes, as OTLP it encodes itself:

- a span `openinference.span.kind = EVALUATOR` in the scored trace, child of the scored span, with
  a Span Link to it and the same attributes the span write-back mode adds. It is filed under the
  scored span's own resource (its `service.name`, `openinference.project.name`, ...), so that a
  backend shows it with the app's traces and not under a project of ctxprec's; the
  instrumentation scope names ctxprec. A RAG event from Kafka has no resource: its `service`
  field becomes `service.name`.
- a log record with event name `gen_ai.evaluation.result`, tied to the scored span
  (`--evaluation-logs`): `on` sends it always, `off` never, `auto` sends it until the endpoint
  says it does not take logs (HTTP 404, 405 or 415, gRPC UNIMPLEMENTED; Arize Phoenix answers
  405), then stops with one WARNING.

The SDK's providers hold one resource each and hide the logs endpoint's status behind their own
ERROR per batch, hence our own encoding: each outcome becomes one small export request, and the
sender batches requests by concatenating their bytes (a valid merge of the messages).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from ctxprec.collector.components import Deadline
from ctxprec.collector.exporters.attributes import outcome_attributes
from ctxprec.collector.exporters.config import ExportConfig
from ctxprec.collector.exporters.otlp_sender import (
    LOGS,
    TRACES,
    METRICS,
    OtlpSender,
    SenderSettings,
)
from ctxprec.collector.failure_log import FailureLog
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision, Outcome
from ctxprec.collector.otlp.values import set_any_value
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.collector.version import VERSION
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import SEVERITY_NUMBER_INFO
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

log = logging.getLogger(__name__)

EXPORTER = "evaluator"
LOGS_EXPORTER = "evaluator_logs"
EVENT_NAME = "gen_ai.evaluation.result"
SPAN_NAME = "context_precision evaluation"
SCOPE_NAME = "ctxprec.evaluator"
# The log record carries the GenAI evaluation fields; the span carries everything.
_EVENT_KEYS = ("gen_ai.evaluation.name", "gen_ai.evaluation.score.value", "gen_ai.evaluation.score.label",
               "gen_ai.evaluation.explanation", "error.type")


@dataclass(frozen=True, slots=True)
class EvaluatorSettings:
    """The evaluator exporter: where its spans (and log records) go, and the score label's threshold."""

    spans: SenderSettings
    logs: SenderSettings | None  # None: no log records (--evaluation-logs off)
    logs_on_trial: bool  # auto: log records stop, with one WARNING, where the endpoint does not take them
    threshold: float

    @classmethod
    def of(cls, export: ExportConfig) -> "EvaluatorSettings":
        if export.forward_to is None:
            raise ValueError("export.forward_to: the evaluator exporter needs an OTLP endpoint")
        logs = SenderSettings.of(export, LOGS) if export.evaluation_logs != "off" else None
        # The evaluator spans' queue also carries the app's logs and metrics (signal_forward.py).
        return cls(SenderSettings.of(export, TRACES, carries=(LOGS, METRICS)), logs, export.evaluation_logs == "auto",
                   export.threshold)


class EvaluatorExporter:
    """A `ResultSink`."""

    def __init__(self, settings: EvaluatorSettings, identity: ScorerIdentity, *, metrics: Metrics,
                 version: str = VERSION) -> None:
        self.url = settings.spans.url
        self.identity = identity
        self.threshold = settings.threshold
        self.metrics = metrics
        self._version = version
        self._spans = OtlpSender(settings.spans, metrics=metrics, exporter=EXPORTER)
        self._logs: OtlpSender | None = None
        if settings.logs is not None:
            on_unsupported = self._logs_unsupported if settings.logs_on_trial else None
            self._logs = OtlpSender(settings.logs, metrics=metrics, exporter=LOGS_EXPORTER,
                                    on_unsupported=on_unsupported)
        self.emitted = 0

    @property
    def sender(self) -> OtlpSender:
        """The evaluator spans' sender, whose queue the app's logs and metrics share."""
        return self._spans

    def failure_logs(self) -> list[FailureLog]:
        return [self._spans.failures] + ([self._logs.failures] if self._logs is not None else [])

    @property
    def logs_enabled(self) -> bool:
        return self._logs is not None and self._logs.unsupported is None

    def _logs_unsupported(self, reason: str) -> None:
        log.warning("evaluator: %s does not take OTLP logs (%s); evaluation log records are turned off, "
                    "evaluator spans go on (set --evaluation-logs off to skip this probe, on to insist)",
                    self.url, reason)

    async def start(self) -> None:
        await self._spans.start()
        if self._logs is not None:
            await self._logs.start()

    async def finish(self, deadline: Deadline) -> None:
        await self._spans.finish(deadline)
        if self._logs is not None:
            await self._logs.finish(deadline)

    async def close(self) -> None:
        await self._spans.close()
        if self._logs is not None:
            await self._logs.close()

    def emit(self, outcome: Outcome) -> None:
        if not outcome.scored:
            return
        attributes = outcome_attributes(outcome, self.identity, threshold=self.threshold)
        if attributes is None:
            return
        r = outcome.retrieval
        trace_id, span_id = _otel_id(r.trace_id, 16), _otel_id(r.span_id, 8)
        if trace_id is None or span_id is None:
            # rag_event ids need not be OTel ids; there is no trace to attach the evaluation to.
            self.metrics.export_dropped.labels(exporter=EXPORTER, reason="invalid_ids").inc()
            return
        resource = dict(r.resource) if r.resource else {}
        if not resource.get("service.name") and r.service:
            resource["service.name"] = r.service
        timestamp = int(outcome.scored_at * 1e9)
        self._spans.forward_raw(self._span_request(outcome, attributes, trace_id, span_id, resource, timestamp), 1)
        if self.logs_enabled:
            assert self._logs is not None
            self._logs.forward_raw(
                self._log_request(outcome, attributes, trace_id, span_id, resource, timestamp), 1)
        self.emitted += 1

    def _span_request(self, outcome: Outcome, attributes: dict[str, Any], trace_id: bytes, span_id: bytes,
                      resource: dict[str, Any], timestamp: int) -> bytes:
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        _fill(rs.resource.attributes, resource)
        ss = rs.scope_spans.add()
        ss.scope.name = SCOPE_NAME
        ss.scope.version = self._version
        span = ss.spans.add()
        span.trace_id = trace_id
        span.span_id = os.urandom(8)
        span.parent_span_id = span_id
        span.flags = 0x100 | 0x200 | 0x01  # parent is remote (known), sampled
        span.name = SPAN_NAME
        span.kind = Span.SPAN_KIND_INTERNAL
        span.start_time_unix_nano = span.end_time_unix_nano = timestamp
        _fill(span.attributes, {"openinference.span.kind": "EVALUATOR", **attributes})
        link = span.links.add()
        link.trace_id = trace_id
        link.span_id = span_id
        _fill(link.attributes, {"ctxprec.link": "scored_span"})
        if outcome.decision is Decision.FAILED:
            span.status.code = Status.STATUS_CODE_ERROR
            span.status.message = outcome.error[1] if outcome.error else "scoring failed"
        return request.SerializeToString()

    def _log_request(self, outcome: Outcome, attributes: dict[str, Any], trace_id: bytes, span_id: bytes,
                     resource: dict[str, Any], timestamp: int) -> bytes:
        request = ExportLogsServiceRequest()
        rl = request.resource_logs.add()
        _fill(rl.resource.attributes, resource)
        sl = rl.scope_logs.add()
        sl.scope.name = SCOPE_NAME
        sl.scope.version = self._version
        record = sl.log_records.add()
        record.time_unix_nano = record.observed_time_unix_nano = timestamp
        record.severity_number = SEVERITY_NUMBER_INFO
        record.event_name = EVENT_NAME
        record.trace_id = trace_id
        record.span_id = span_id
        record.flags = 0x01
        body = attributes.get("gen_ai.evaluation.explanation") or (outcome.error[1] if outcome.error else None)
        if body:
            record.body.string_value = str(body)
        event = {k: attributes[k] for k in _EVENT_KEYS if k in attributes}
        event["ctxprec.record_id"] = str((outcome.record or {}).get("id", ""))
        _fill(record.attributes, event)
        return request.SerializeToString()


def _fill(target: Any, attributes: dict[str, Any]) -> None:
    """Appends `attributes` to a repeated KeyValue field."""
    for key, value in attributes.items():
        if value is None:
            continue
        kv: KeyValue = target.add(key=str(key))
        set_any_value(kv.value, value)


def _otel_id(value: str, size: int) -> bytes | None:
    """A hex trace (16 bytes) or span (8 bytes) id, or None when it is not a valid, non-zero one."""
    if len(value) != size * 2:
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return raw if any(raw) else None
