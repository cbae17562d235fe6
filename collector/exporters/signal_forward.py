"""The app's OTLP logs and metrics on to `--forward-to` (a `SignalPassThrough`), so that an app
whose `OTEL_EXPORTER_OTLP_ENDPOINT` points at ctxprec loses none of its signals.

They go through the forward queue the spans use (the span forwarder's, or in evaluator mode the
evaluator spans'): one byte bound, one deadline, one backoff through an outage, each signal to
its own path (`/v1/logs`, `/v1/metrics`) or gRPC service, as it came. They are counted apart: as
exporter `log_forwarder` (log records) and `metric_forwarder` (data points) in
`ctxprec_exported_spans_total` and `ctxprec_export_dropped_total`. Without `--forward-to` they
have nowhere to go: each is dropped as `no_forward_to`, and the first of each signal says once
what to set.
"""
from __future__ import annotations

import logging

from ctxprec.collector.components import Stateless
from ctxprec.collector.exporters.otlp_sender import CARRIED_EXPORTERS, OtlpSender
from ctxprec.collector.metrics.registry import Metrics

log = logging.getLogger(__name__)

NO_FORWARD_TO = "no_forward_to"


class SignalForwarder(Stateless):
    """Its lifecycle is the sender's owner's (the span write-back or the evaluator exporter)."""

    def __init__(self, sender: OtlpSender | None, *, metrics: Metrics) -> None:
        self._sender = sender
        self._metrics = metrics
        self._told: set[str] = set()

    def pass_signal(self, signal: str, data: bytes, items: int) -> None:
        if self._sender is not None:
            self._sender.forward_raw(data, items, signal)
            return
        exporter = CARRIED_EXPORTERS[signal]
        self._metrics.export_dropped.labels(exporter=exporter, reason=NO_FORWARD_TO).inc(items)
        if signal not in self._told:
            self._told.add(signal)
            log.warning("OTLP %s arrive but --forward-to is not set: they are dropped, counted in "
                        "ctxprec_export_dropped_total{exporter=\"%s\",reason=\"%s\"}. Set --forward-to (YAML "
                        "export.forward_to) to your OpenTelemetry Collector or backend to pass them on, or send "
                        "the app's %s there directly (OTEL_EXPORTER_OTLP_%s_ENDPOINT)", signal, exporter,
                        NO_FORWARD_TO, signal, signal.upper())
