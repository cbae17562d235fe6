"""Wires the sidecar, in the shape of an OpenTelemetry Collector pipeline. This is the only place
that connects the stages (collector/components.py names the seams); data flows one way:

    receivers (OTLP gRPC/HTTP, Kafka) -> assembly (OtlpIngest) -> sampling (RetrievalGate)
    -> scoring (ScoringWorkers) -> ResultFanout -> result sinks (metrics and drift, diagnostics,
                                                   span write-back, evaluator spans, Kafka results,
                                                   Phoenix and Langfuse, ...)
    drift monitor -> adaptive sampler (a service's rate rises while a drift is suspected)
    diagnostics -> /diagnostics/* on the metrics port, and the Kafka diagnostics topic
    assembly -> span write-back (span mode: every span goes on; retrieval spans wait for results)

`Pipeline` owns start and stop order. Stopping is graceful: inputs close first (Kafka only stops
fetching), buffered traces are handed to scoring, scoring drains until the shutdown deadline,
Kafka commits everything scored (then leaves its group), what is still running is cancelled and
decided failed/shutdown, and only then do the exporters flush and close, so every retrieval taken
in gets its decision. Start-up does the judge client's one-time work (`engine.warm_up`), so that
the first scores do not pay for it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from ctxprec.collector.components import ResultSink
from ctxprec.collector.config import ServeConfig
from ctxprec.collector.exporters.activity_log import ActivityLog
from ctxprec.collector.exporters.fanout import ResultFanout
from ctxprec.collector.exporters.redaction import RedactingSink, redact_text
from ctxprec.collector.failure_log import FailureLog
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.drift import DriftMonitor, MetricsSink
from ctxprec.collector.metrics.http import JudgeReachable, MetricsServer
from ctxprec.collector.metrics.judge import (
    JudgeFailureLog,
    JudgeMetricsObserver,
    Observers,
)
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.sampling.decide import (
    DailyBudget,
    RecentKeys,
    RetrievalGate,
    RssGuard,
    current_rss_bytes,
    score_throttle,
)
from ctxprec.collector.sampling.adaptive import AdaptiveSampler, AdaptiveSettings
from ctxprec.collector.sampling.sampler import Sampler
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.collector.scoring.placement import make_engine
from ctxprec.collector.scoring.workers import ScoringWorkers
from ctxprec.collector.version import VERSION
from ctxprec.scorer.judge.chat import REQUEST_OUTCOMES
from ctxprec.scorer.judge.local import FALLBACK_REASONS, LOCAL_OUTCOMES

log = logging.getLogger(__name__)


class Pipeline:
    def __init__(self, config: ServeConfig, *, metrics: Metrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics(max_services=config.metrics.max_services,
                                          max_retrievers=config.metrics.max_retrievers, version=VERSION)
        # Judge failures in the log: the first at once, then a count per minute.
        self.judge_failures = FailureLog(f"judge {config.judge.model or 'local'}", logging.getLogger("ctxprec.judge"))
        # In this process, or a scoring process on another core (collector/scoring/placement.py).
        self.engine = make_engine(config, Observers(JudgeMetricsObserver(self.metrics),
                                                    JudgeFailureLog(self.judge_failures)))
        self.identity = ScorerIdentity.of_engine(self.engine)
        sampling, scoring = config.sampling, config.scoring
        # Always the adaptive wrapper: switched off it never boosts, and it still publishes each
        # service's rate to `ctxprec_sample_rate`. Keyed by the capped service label, as the drift
        # monitor is, so that the monitor's observer finds the service it boosts.
        self.sampler = AdaptiveSampler(Sampler(sampling.default_rate, sampling.rules),
                                       AdaptiveSettings.of(sampling), key=self.metrics.service)
        sample_rate = Children(self.metrics.sample_rate)
        self.sampler.subscribe(lambda service, rate: sample_rate(service).set(rate))
        # Every decision ends here: results to the sinks, then counted, then the input released.
        self.fanout = ResultFanout(self.metrics)
        self.budget = DailyBudget(sampling.daily_budget_usd) if sampling.daily_budget_usd else None
        self.drift = DriftMonitor(self.metrics, config.drift)
        self.drift.observers.append(self.sampler.observe)
        self.fanout.add(MetricsSink(self.metrics, self.drift))
        self.diagnostics: Any = None  # diagnostics.sink.DiagnosticsSink, after the MetricsSink
        self._build_diagnostics()
        # One line a minute in the log: what came in, what was scored, the mean score per service.
        self.activity = ActivityLog(self._spans_received)
        self.fanout.add(self.activity)
        self.activity_interval_s = 60.0
        self._minute_task: asyncio.Task[None] | None = None
        # With --redact-pii every scored outcome's text is redacted before any exporter sees it.
        scored_downstream: ResultSink = RedactingSink(self.fanout) if config.judge.redact_pii else self.fanout
        self.workers = ScoringWorkers(self.engine, downstream=scored_downstream, identity=self.identity,
                                      queue_size=scoring.queue_size, workers=scoring.workers, metrics=self.metrics,
                                      budget=self.budget)
        self.gate = RetrievalGate(
            sampler=self.sampler, queue=self.workers, decisions=self.fanout,
            throttle=score_throttle(sampling.max_scores_per_minute) if sampling.max_scores_per_minute else None,
            budget=self.budget,
            rss_guard=(RssGuard(int(scoring.max_rss_mb * 1024 * 1024), probe=self._rss_bytes)
                       if scoring.max_rss_mb else None),
            recent=RecentKeys(sampling.duplicate_window_s))

        self.writeback: Any = None  # span mode: exporters.span_writeback.SpanWriteBack
        self.evaluator: Any = None  # evaluator mode: exporters.evaluator.EvaluatorExporter
        self._build_write_back()
        # `--sink`: scores into backends' own stores (Phoenix annotations, Langfuse scores).
        self.sinks: list[Any] = self._build_sinks()
        self.ingest = self._build_ingest()
        self.receivers: list[Any] = self._build_otlp_receivers()
        # Kafka: an optional receiver and its results producer (another ResultSink).
        self.kafka_receiver: Any = None
        self.kafka_results: Any = None
        self.kafka_diagnostics: Any = None  # exporters.kafka_diagnostics.KafkaDiagnosticsExporter
        self._build_kafka()
        local = self.engine.model == "local"
        self.metrics.start_at_zero(receivers=self._receiver_names(), judge_model=self.engine.model,
                                   judge_outcomes=LOCAL_OUTCOMES if local else REQUEST_OUTCOMES,
                                   fallback_reasons=FALLBACK_REASONS if local else ())
        self.metrics_server: MetricsServer | None = None
        if config.metrics.listen is not None:
            host, port = config.metrics.listen
            self.metrics_server = MetricsServer(self.metrics, host=host, port=port,
                                                security=config.metrics.security(), metrics_open=config.metrics.open)
            self._add_ready_checks(self.metrics_server)
            self._add_diagnostics_routes(self.metrics_server)
        self._started = False

    # -- assembly of the parts --

    def _receiver_names(self) -> list[str]:
        r = self.config.receivers
        names = [name for name, listen in (("otlp_grpc", r.otlp_grpc), ("otlp_http", r.otlp_http)) if listen is not None]
        return names + (["kafka"] if self.config.kafka.enabled else [])

    def _spans_received(self) -> float:
        return sum(sample.value for family in self.metrics.spans_received.collect() for sample in family.samples
                   if sample.name.endswith("_total"))

    def failure_logs(self) -> list[FailureLog]:
        logs = [self.judge_failures]
        if self.writeback is not None:
            logs.append(self.writeback.sender.failures)
        if self.evaluator is not None:
            logs.extend(self.evaluator.failure_logs())
        return logs

    async def _every_minute(self) -> None:
        last = time.monotonic()
        while True:
            # Short naps, so that a changed interval (tests) takes effect at once.
            await asyncio.sleep(min(1.0, self.activity_interval_s))
            if time.monotonic() - last < self.activity_interval_s:
                continue
            last = time.monotonic()
            try:
                self.activity.tick()
                for failures in self.failure_logs():
                    failures.flush()
            except Exception:  # the log lines must never stop the sidecar
                log.exception("writing the activity summary failed")

    async def check_judge(self) -> bool:
        """Whether the judge answers a connection now; a WARNING says so when it does not, so that
        a wrong --judge-api-base shows at start rather than with the first failed score."""
        reachable = await JudgeReachable(self.engine.model, self.config.judge.api_base, timeout_s=2.0)()
        if not reachable:
            self.judge_failures.failed("unreachable", f"no connection to {self.config.judge.api_base}; "
                                                      "scores will fail until it answers")
        return reachable

    def _rss_bytes(self) -> int:
        """The memory cap covers the scoring process too: they share the container's limit."""
        child = getattr(self.engine, "rss_bytes", None)
        return current_rss_bytes() + (child() if child is not None else 0)

    def add_sink(self, sink: ResultSink) -> None:
        """Extra result sinks (e.g. an embedding app's own); they get every retrieval's outcome."""
        self.fanout.add(sink)

    def _build_diagnostics(self) -> None:
        config = self.config.diagnostics
        if not config.enabled:
            return
        from ctxprec.collector.diagnostics.sink import DiagnosticsSink

        settings = config.settings(max_services=self.config.metrics.max_services,
                                   max_retrievers=self.config.metrics.max_retrievers)
        # The sink hooks its drift explainer into the monitor (`drift.on_alarm`).
        self.diagnostics = DiagnosticsSink(settings, metrics=self.metrics, drift=self.drift,
                                           redact=self._preview_redaction())
        self.add_sink(self.diagnostics)

    def _preview_redaction(self) -> Callable[[str], str] | None:
        """Text previews of noisy documents leave the process: not at all unless previews are on;
        with --redact-pii through the same redaction as the judge's prompts (the RedactingSink in
        front of the fan-out already applied it to the contexts; redacting is idempotent, and
        this keeps previews safe whatever feeds the sink); as they are otherwise."""
        if not self.config.diagnostics.previews:
            return None
        return redact_text if self.config.judge.redact_pii else _as_is

    def _add_diagnostics_routes(self, server: MetricsServer) -> None:
        sink = self.diagnostics
        if sink is None:
            return
        server.add_json_route("/diagnostics/documents", sink.documents_json)
        server.add_json_route("/diagnostics/drift", sink.drift_json)
        server.add_json_route("/diagnostics/top_k", sink.top_k_json)

    def _build_write_back(self) -> None:
        export = self.config.export
        if export.forward_to is None:
            return
        if self.config.write_back == "span":
            from ctxprec.collector.exporters.otlp_sender import (
                OtlpSender,
                SenderSettings,
            )
            from ctxprec.collector.exporters.span_writeback import SpanWriteBack

            sender = OtlpSender(SenderSettings.of(export), metrics=self.metrics)
            self.writeback = SpanWriteBack(sender, self.identity, metrics=self.metrics, threshold=export.threshold,
                                           hold_deadline_s=export.hold_deadline_s)
            self.add_sink(self.writeback)
        else:
            from ctxprec.collector.exporters.evaluator import EvaluatorExporter

            self.evaluator = EvaluatorExporter(export, self.identity, metrics=self.metrics, version=VERSION)
            self.add_sink(self.evaluator)

    def _build_sinks(self) -> list[Any]:
        if not self.config.export.sinks:
            return []
        from ctxprec.collector.exporters.sinks import build_sinks

        sinks = build_sinks(self.config.export, self.identity, self.metrics)
        for sink in sinks:
            self.add_sink(sink)
        return sinks

    def _build_ingest(self) -> Any:
        from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest

        settings = IngestSettings(conventions=self.config.conventions, buffer=self.config.assembly)
        return OtlpIngest(keep_trace=self.sampler.keep_trace, sink=self.gate, metrics=self.metrics,
                          settings=settings, passthrough=self.writeback)

    def _build_otlp_receivers(self) -> list[Any]:
        config = self.config.receivers
        receivers: list[Any] = []
        if config.otlp_grpc is not None:
            from ctxprec.collector.receivers.otlp_grpc import OtlpGrpcReceiver

            receivers.append(OtlpGrpcReceiver(self.ingest, metrics=self.metrics, config=config))
        if config.otlp_http is not None:
            from ctxprec.collector.receivers.otlp_http import OtlpHttpReceiver

            receivers.append(OtlpHttpReceiver(self.ingest, metrics=self.metrics, config=config))
        return receivers

    def _build_kafka(self) -> None:
        kafka = self.config.kafka
        if not kafka.enabled:
            return
        kafka = kafka.with_queue_size(self.config.scoring.queue_size)
        from ctxprec.collector.receivers.kafka import KafkaReceiver

        barrier = None
        if kafka.results_topic:
            from ctxprec.collector.exporters.kafka_results import KafkaResultsExporter

            self.kafka_results = KafkaResultsExporter(kafka, self.metrics)
            self.add_sink(self.kafka_results)
            barrier = self.kafka_results.flush
        if kafka.diagnostics_topic:
            if self.diagnostics is None:
                raise ValueError("kafka.diagnostics_topic needs the diagnostics on (--diagnostics on)")
            from ctxprec.collector.exporters.kafka_diagnostics import KafkaDiagnosticsExporter

            sink = self.diagnostics
            self.kafka_diagnostics = KafkaDiagnosticsExporter(kafka, lambda: sink.documents_json({}).body,
                                                              self.metrics)
        ingest = None if kafka.format == "rag_event" else self.ingest
        # rag_event: the receiver makes the head sampling decision itself, with the gate's sampler.
        self.kafka_receiver = KafkaReceiver(kafka, sink=self.gate, metrics=self.metrics, ingest=ingest,
                                            commit_barrier=barrier, sampler=self.sampler)

    def _add_ready_checks(self, server: MetricsServer) -> None:
        for receiver in self.receivers:
            name = type(receiver).__name__

            async def listening(r: Any = receiver) -> bool:
                return bool(r.listening)

            server.add_check(name, listening)
        if self.kafka_receiver is not None:
            async def kafka_ready() -> bool:
                return bool(self.kafka_receiver.ready)

            server.add_check("kafka", kafka_ready)
        server.add_check("judge", JudgeReachable(self.engine.model, self.config.judge.api_base))

    # -- lifecycle --

    @property
    def otlp_grpc_port(self) -> int | None:
        return next((r.port for r in self.receivers if type(r).__name__ == "OtlpGrpcReceiver"), None)

    @property
    def otlp_http_port(self) -> int | None:
        return next((r.port for r in self.receivers if type(r).__name__ == "OtlpHttpReceiver"), None)

    @property
    def metrics_url(self) -> str | None:
        return self.metrics_server.url if self.metrics_server is not None else None

    async def start(self) -> None:
        """Exporters and scoring first, inputs last: nothing is accepted before it can be handled."""
        try:
            await self.engine.warm_up()
            await self.workers.start()
            if self.writeback is not None:
                await self.writeback.start()
            if self.evaluator is not None:
                await self.evaluator.start()
            if self.kafka_results is not None:
                await self.kafka_results.start()
            if self.kafka_diagnostics is not None:
                await self.kafka_diagnostics.start()
            for sink in self.sinks:
                await sink.start()
            await self.ingest.start()
            for receiver in self.receivers:
                await receiver.start()
            if self.kafka_receiver is not None:
                await self.kafka_receiver.start()
            if self.metrics_server is not None:
                await self.metrics_server.start()
            self._minute_task = asyncio.create_task(self._every_minute(), name="ctxprec-minute")
        except BaseException:
            await self.stop()
            raise
        self._started = True

    async def stop(self) -> None:
        if self._minute_task is not None:
            self._minute_task.cancel()
            await asyncio.gather(self._minute_task, return_exceptions=True)
            self._minute_task = None
        timeout = self.config.scoring.shutdown_timeout_s
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        for receiver in self.receivers:
            await _quietly(receiver.stop(), f"stopping {type(receiver).__name__}")
        kafka = self.kafka_receiver
        if kafka is not None:  # stop fetching; it keeps its group (and commits) until scoring drained
            await _quietly(kafka.stop_reading(), "stopping the Kafka read loop")
        # Buffered traces go to scoring now. The workers get the deadline: what they cannot finish
        # is decided failed/shutdown, which releases its held span with `error.type` attached.
        await _quietly(self.ingest.stop(), "stopping trace assembly")
        await _quietly(self.workers.drain(left()), "draining the scoring workers")
        if kafka is not None:
            await _quietly(kafka.wait_dead_letters(left()), "writing dead letters")
            # No await between these two: every score finished so far is committed below, and
            # nothing can turn into a score after the freeze (what is cut is read again).
            kafka.freeze()
        self.workers.cancel()
        if kafka is not None:
            await _quietly(kafka.stop(), "stopping the Kafka receiver")
        await _quietly(self.workers.aclose(0.0), "stopping the scoring workers")
        self.gate.closed = True
        if self.kafka_results is not None:
            await _quietly(self.kafka_results.stop(), "stopping the Kafka results exporter")
        if self.kafka_diagnostics is not None:  # after scoring drained: the last round counts every score
            await _quietly(self.kafka_diagnostics.stop(), "writing the last diagnostics summary")
        if self.evaluator is not None:
            await _quietly(self.evaluator.stop(), "flushing evaluator spans")
        if self.writeback is not None:
            # Every retrieval is decided by now; held spans still waiting go out unscored.
            await _quietly(self.writeback.stop(left() + 1.0), "flushing forwarded spans")
        # After the forwarded spans: an annotation needs its span stored in the backend first.
        # What is left of the deadline, and a moment for what is queued, as the span flush gets.
        # Side by side, so that one backend that is down does not use up another's time.
        await asyncio.gather(*(_quietly(sink.stop(left() + 1.0), f"flushing the {sink.name} sink")
                               for sink in self.sinks))
        await _quietly(self.engine.aclose(), "closing the judge client")
        if self.metrics_server is not None:
            await _quietly(self.metrics_server.stop(), "stopping the metrics server")
        self._started = False

    async def __aenter__(self) -> "Pipeline":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _as_is(text: str) -> str:
    return text


async def _quietly(awaitable: Any, what: str) -> None:
    """Shutdown goes on past a part that fails to stop; the failure is logged."""
    try:
        await awaitable
    except Exception:
        log.exception("error while %s", what)
