"""The composition root: builds every stage from its settings and declares the pipeline as a
service graph (service_graph.py), in the shape of an OpenTelemetry Collector pipeline. This is
the only place that connects stages (collector/components.py declares the seams):

    receivers (OTLP gRPC/HTTP, Kafka) -> assembly (OtlpIngest) -> sampling (RetrievalGate)
    -> [resolving (DocumentResolver: documents known by id get their text)]
    -> scoring (ScoringWorkers, over the engine) -> [redaction] -> ResultFanout
    -> result sinks (metrics and drift, activity log, diagnostics, span write-back | evaluator
       spans, Kafka results, Phoenix and Langfuse, ...)
    assembly -> span write-back (span mode: every span goes on; retrieval spans wait for results)
    assembly -> signal forwarder (the app's OTLP logs and metrics, through the spans' forward queue)
    cluster feed -> drift, diagnostics (cluster learning: the other replicas' scores, read back
       from the Kafka results topic)

and the feedback links, named in the graph: drift -> adaptive sampling (a service's rate rises
while a drift is suspected), diagnostics -> the drift alarm (its explainer), Kafka results ->
the Kafka receiver (records flushed before each commit), the ack travelling with each Kafka
retrieval to the fan-out, which releases it, the Kafka receiver -> the Kafka diagnostics (with
cluster learning, the owner of the input's partition 0 publishes for the cluster).

Start and stop order come from the graph: consumers start before producers; on stop every stage
finishes (inputs close first, buffered traces go to scoring, scoring drains until the shutdown
deadline and decides what is left `failed`/`shutdown`, exporters flush, the span forwarder before
the result sinks), then every stage closes (Kafka commits everything decided and leaves its
group). So every retrieval taken in gets its decision. Adding an exporter: its module, built here
by one `_add_exporter` call (a stage and its edge from the fan-out).
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Callable

from ctxprec.collector.components import Deadline, ResultSink
from ctxprec.collector.diagnostics.views import JsonResponse
from ctxprec.collector.config import ServeConfig
from ctxprec.collector.exporters.activity_log import ActivityLog
from ctxprec.collector.exporters.fanout import ResultFanout
from ctxprec.collector.exporters.redaction import RedactingSink, redact_text
from ctxprec.collector.cluster.records import OUTCOMES as CLUSTER_OUTCOMES
from ctxprec.collector.failure_log import FailureLog, Flushes
from ctxprec.collector.log_setup import repeated_lines
from ctxprec.collector.kafka.config import KafkaTopic
from ctxprec.collector.kafka.score_headers import new_replica_id
from ctxprec.collector.listeners import ListenerGuard
from ctxprec.collector.memory import anonymous_rss_bytes
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.drift import DriftMonitor
from ctxprec.collector.metrics.http import JudgeReachable, MetricsServer
from ctxprec.collector.metrics.judge import (
    JudgeFailureLog,
    JudgeMetricsObserver,
    Observers,
    SharedCacheMetricsObserver,
)
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.metrics.sink import MetricsSink
from ctxprec.collector.sampling.adaptive import AdaptiveSampler, AdaptiveSettings
from ctxprec.collector.sampling.decide import (
    DailyBudget,
    RecentKeys,
    RetrievalGate,
    RssGuard,
    score_throttle,
)
from ctxprec.collector.sampling.sampler import Sampler
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.collector.scoring.placement import EngineStage, Placement, make_engine
from ctxprec.collector.scoring.workers import ScoringWorkers
from ctxprec.collector.service_graph import Readiness, ServiceGraph
from ctxprec.collector.version import VERSION
from ctxprec.scorer.judge.chat import REQUEST_OUTCOMES
from ctxprec.scorer.judge.local import FALLBACK_REASONS, LOCAL_OUTCOMES
from ctxprec.scorer.judge.shared_cache import OUTCOMES as SHARED_CACHE_OUTCOMES

if TYPE_CHECKING:  # built only when configured, so imported where they are built
    from ctxprec.collector.assembly.ingest import OtlpIngest
    from ctxprec.collector.canary.runner import JudgeCanary
    from ctxprec.collector.shadow.shadow import ShadowJudge
    from ctxprec.collector.cluster.feed import ClusterFeed
    from ctxprec.collector.diagnostics.sink import DiagnosticsSink
    from ctxprec.collector.exporters.evaluator import EvaluatorExporter
    from ctxprec.collector.exporters.kafka_diagnostics import KafkaDiagnosticsExporter
    from ctxprec.collector.exporters.kafka_results import KafkaResultsExporter
    from ctxprec.collector.exporters.signal_forward import SignalForwarder
    from ctxprec.collector.exporters.sinks import BackendSink
    from ctxprec.collector.exporters.span_writeback import SpanWriteBack
    from ctxprec.collector.receivers.kafka import KafkaReceiver
    from ctxprec.collector.receivers.otlp_grpc import OtlpGrpcReceiver
    from ctxprec.collector.receivers.otlp_http import OtlpHttpReceiver
    from ctxprec.collector.resolving.stage import DocumentResolver

log = logging.getLogger(__name__)

# How long past the shutdown deadline an exporter may take to send what the last decisions gave
# it: the span forwarder and the result sinks a moment; the Kafka producers and the evaluator
# spans their own allowance (they were given these before the deadline was shared).
FORWARD_GRACE_S = 1.0
KAFKA_RESULTS_GRACE_S = 10.0
EXPORTER_GRACE_S = 5.0


class Pipeline:
    def __init__(self, config: ServeConfig, *, metrics: Metrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics(max_services=config.metrics.max_services,
                                          max_retrievers=config.metrics.max_retrievers,
                                          max_series=config.metrics.max_series_per_metric, version=VERSION)
        self.graph = ServiceGraph()
        self.writeback: SpanWriteBack | None = None
        self.evaluator: EvaluatorExporter | None = None
        self.diagnostics: DiagnosticsSink | None = None
        self.sinks: list[BackendSink] = []
        self.receivers: list[OtlpGrpcReceiver | OtlpHttpReceiver] = []
        self.kafka_receiver: KafkaReceiver | None = None
        self.kafka_results: KafkaResultsExporter | None = None
        self.kafka_diagnostics: KafkaDiagnosticsExporter | None = None
        self.cluster_feed: ClusterFeed | None = None
        self.replica: str | None = None  # this replica's name in its score records, with cluster learning
        self.metrics_server: MetricsServer | None = None
        self.listener_guards: list[ListenerGuard] = []  # the HTTP listeners' (gRPC keeps its limits itself)
        self._add_scoring()
        self.resolver: DocumentResolver | None = self._add_resolving()
        self._add_sampling()
        self._add_results()
        self._add_judging()
        self._add_canary()
        self._add_shadow()
        self.ingest: OtlpIngest = self._add_ingest()
        self._add_receivers()
        self._add_kafka()
        self._add_metrics_server()
        local = self.engine.model == "local"
        self.metrics.start_at_zero(receivers=self._receiver_names(), judge_model=self.engine.model,
                                   judge_outcomes=LOCAL_OUTCOMES if local else REQUEST_OUTCOMES,
                                   fallback_reasons=FALLBACK_REASONS if local else (),
                                   cluster_outcomes=CLUSTER_OUTCOMES if self.cluster_feed is not None else (),
                                   shared_cache_outcomes=SHARED_CACHE_OUTCOMES if self.shared_cache else (),
                                   resolver_sources=[s.name for s in config.resolver.sources])
        self.graph.waves()  # a cycle is a wiring mistake: fail at construction, not at shutdown

    # -- the stages, from the judge back to the inputs --

    def _add_scoring(self) -> None:
        config = self.config
        # Judge failures in the log: the first at once, then a count per minute.
        self.judge_failures = FailureLog(f"judge {config.judge.model or 'local'}", logging.getLogger("ctxprec.judge"))
        # In this process, or a scoring process on another core (collector/scoring/placement.py).
        self.engine = make_engine(placement_of(config), Observers(JudgeMetricsObserver(self.metrics),
                                                                  JudgeFailureLog(self.judge_failures)),
                                  SharedCacheMetricsObserver(self.metrics))
        self.identity = ScorerIdentity.of_engine(self.engine)
        self.graph.add("engine", EngineStage(self.engine),
                       ready=Readiness("judge", JudgeReachable(self.engine.model, config.judge.api_base)))
        # Every decision ends in the fan-out: results to the sinks, then counted, then the input released.
        self.fanout = ResultFanout(self.metrics)
        self.graph.add("fanout", self.fanout)
        # With --redact-pii every scored outcome's text is redacted before any exporter sees it.
        scored_downstream: ResultSink = self.fanout
        if config.judge.redact_pii:
            redaction = RedactingSink(self.fanout)
            self.graph.add("redaction", redaction)
            self.graph.connect("redaction", "fanout", "ResultSink")
            scored_downstream = redaction
        scoring = config.scoring
        self.workers = ScoringWorkers(self.engine, downstream=scored_downstream, identity=self.identity,
                                      queue_size=scoring.queue_size, workers=scoring.workers, metrics=self.metrics,
                                      record_text_chars=config.judge.record_text_chars,
                                      redact=redact_text if config.judge.redact_pii else None)
        self.graph.add("workers", self.workers)
        self.graph.connect("workers", "engine", "scores with")
        self.graph.connect("workers", "redaction" if config.judge.redact_pii else "fanout", "ResultSink")

    def _add_judging(self) -> None:
        """How far to trust the judge: the agreement registry (`/diagnostics/judge`, the
        `ctxprec_judge_*` agreement metrics) other parts add to, with the live judge described."""
        from ctxprec.collector.judging.agreement import JudgeAgreement

        judging = self.config.judging
        self.judge_agreement = JudgeAgreement(self.metrics, kappa_alert=judging.kappa_alert)
        self.metrics.judge_kappa_threshold.set(judging.kappa_alert)
        from ctxprec.scorer.labels import UNMATCHED_REASONS

        for reason in UNMATCHED_REASONS:  # at 0 from the start, as every series with known label values
            self.metrics.judge_labels_unmatched.labels(reason=reason)
        identity = self.identity
        self.judge_agreement.describe(identity.identifier, model=identity.model,
                                      prompt_version=identity.prompt_version, role="live")
        # People's labels, matched against the verdicts of recent scores (POST /labels, --labels-file).
        from ctxprec.collector.judging.labels import LabelIntake, LabelsFile, VerdictRecorder

        self.labels = LabelIntake(self.judge_agreement, verdict_capacity=judging.verdict_store_size,
                                  max_waiting=judging.max_waiting_labels, wait_s=judging.labels_wait_s)
        self._add_exporter("verdict_store", VerdictRecorder(self.labels.book, identity.identifier))
        self._add_phoenix_labels()
        self.labels_file: LabelsFile | None = None
        if judging.labels_file is not None:
            self.labels_file = LabelsFile(judging.labels_file, self.labels)
            self.graph.add("labels_file", self.labels_file)
            self.graph.connect("labels_file", "verdict_store", "human labels, matched against its verdicts")

    def _add_phoenix_labels(self) -> None:
        """With `--sink phoenix=URL`: people's annotations read back from that Phoenix as labels."""
        from ctxprec.collector.judging.phoenix_labels import PhoenixLabels

        self.phoenix_labels: PhoenixLabels | None = None
        interval = self.config.judging.labels_phoenix_interval_s
        target = next((t for t in self.config.export.sinks if t.kind == "phoenix"), None)
        if interval is None or target is None:
            return
        from ctxprec.collector.exporters.sinks import PHOENIX_API_KEY

        self.phoenix_labels = PhoenixLabels(target.url, self.labels, interval_s=interval,
                                            api_key=os.environ.get(PHOENIX_API_KEY) or None,
                                            capacity=self.config.judging.verdict_store_size)
        self._add_exporter("phoenix_labels", self.phoenix_labels)

    def _add_resolving(self) -> DocumentResolver | None:
        """With `resolver.sources`: the stage between the gate and the workers that looks up the
        text of documents traces name only by id (collector/resolving/)."""
        if not self.config.resolver.enabled:
            return None
        from ctxprec.collector.resolving.stage import DocumentResolver

        resolver = DocumentResolver(self.config.resolver, downstream=self.workers, decisions=self.fanout,
                                    metrics=self.metrics)
        self.graph.add("resolver", resolver)
        self.graph.connect("resolver", "workers", "ScoringQueue")
        self.graph.connect("resolver", "fanout", "Decisions")
        return resolver

    def _add_sampling(self) -> None:
        sampling, scoring = self.config.sampling, self.config.scoring
        # Always the adaptive wrapper: switched off it never boosts, and it still publishes each
        # service's rate to `ctxprec_sample_rate`. Keyed by the capped service label, as the drift
        # monitor is, so that the monitor's observer finds the service it boosts.
        self.sampler = AdaptiveSampler(Sampler(sampling.default_rate, sampling.rules),
                                       AdaptiveSettings.of(sampling), key=self.metrics.service)
        sample_rate = Children(self.metrics.sample_rate, self.metrics.budget)
        self.sampler.subscribe(lambda service, rate: sample_rate(service).set(rate))
        resolver = self.resolver
        self.gate = RetrievalGate(
            sampler=self.sampler, queue=resolver or self.workers, decisions=self.fanout,
            resolvable=resolver.resolvable if resolver is not None else None,
            throttle=score_throttle(sampling.max_scores_per_minute) if sampling.max_scores_per_minute else None,
            budget=DailyBudget(sampling.daily_budget_usd) if sampling.daily_budget_usd else None,
            rss_guard=(RssGuard(int(scoring.max_rss_mb * 1024 * 1024), probe=self._rss_bytes)
                       if scoring.max_rss_mb else None),
            recent=RecentKeys(sampling.duplicate_window_s))
        self.graph.add("gate", self.gate)
        self.graph.connect("gate", "resolver" if resolver is not None else "workers", "ScoringQueue")
        if resolver is not None:
            gate = self.gate

            def report_unspent() -> None:
                resolver.costs = gate

            self.graph.link("resolver", "gate", "what a retrieval decided without a score did not spend",
                            wire=report_unspent)
        self.graph.connect("gate", "fanout", "Decisions")
        if self.gate.budget is not None:
            workers = self.workers

            def report_costs() -> None:
                workers.costs = self.gate

            self.graph.link("workers", "gate", "what each score cost, against the daily budget", wire=report_costs)

    def _add_results(self) -> None:
        """The result sinks, in the order the fan-out hands them each outcome."""
        graph = self.graph
        self.drift = DriftMonitor(self.metrics, self.config.drift)
        self._add_exporter("metrics", MetricsSink(self.metrics, self.drift))
        graph.add("drift", self.drift)
        graph.connect("metrics", "drift", "scores")
        graph.link("drift", "gate", "a service's sample rate rises while its drift is suspected",
                   wire=lambda: self.drift.observers.append(self.sampler.observe))
        self._add_diagnostics()
        # One line a minute in the log: what came in, what was scored, the mean score per service.
        self.activity = ActivityLog(self._spans_received, failure_logs=self.failure_logs)
        self._add_exporter("activity", self.activity)
        self._add_write_back()
        self._add_signal_forwarder()
        self._add_backend_sinks()

    def _add_canary(self) -> None:
        """The judge canary (collector/canary/): the live judge's model re-judging a set of samples
        on a schedule; a change it notices is `ctxprec_judge_changed`, a log line, and a note on
        every drift alarm raised within the window of it. A new fingerprint is a new drift baseline."""
        from ctxprec.collector.canary.watch import JudgeWatch

        canary = self.config.canary
        self.judge_watch = JudgeWatch(self.metrics, window_s=canary.change_window_s,
                                      on_new_fingerprint=lambda before, after: self.drift.new_baseline(
                                          f"the judge's fingerprint changed ({before} -> {after})"))
        self.drift.judge_note = self.judge_watch.drift_words
        if self.diagnostics is not None:
            self.diagnostics.explainer.judge_note = self.judge_watch.drift_words
        self.canary: JudgeCanary | None = None
        if not canary.enabled(self.engine.model):
            return
        from ctxprec.collector.canary.runner import JudgeCanary
        from ctxprec.collector.canary.samples import load_canary

        samples = load_canary(canary.file)
        judge = self.config.judge
        self.canary = JudgeCanary.build(
            samples, judge.judge_config(), scale=judge.scale,
            observer=JudgeMetricsObserver(self.metrics, "canary"), watch=self.judge_watch,
            interval_s=canary.interval_s, false_alarm_rate=canary.false_alarm_rate, metrics=self.metrics,
            budget=self.gate.budget, live_fingerprint=lambda: str(self.engine.fingerprint),
            alarmed_services=self.drift.alarmed_services)
        # The canary is the live judge asked again (its fingerprint is the live one's): not
        # described apart in the agreement registry, only its own section.
        self.judge_agreement.add_section("canary", self.canary.view)
        # Outside the flow of retrievals: it asks the judge on its own schedule.
        self.graph.add("canary", self.canary, extension=True)

    def _add_shadow(self) -> None:
        """`--shadow-judge-model`: a candidate judging a share of the scored retrievals beside the
        live judge, compared with it in the agreement registry, never published as scores."""
        shadow = self.config.shadow
        self.shadow: ShadowJudge | None = None
        if not shadow.enabled:
            return
        from ctxprec.collector.shadow.shadow import ShadowJudge
        from ctxprec.scorer.engine import build_engine

        engine = build_engine(shadow.judge_config(self.config.judge.judge_config()), scale=self.config.judge.scale,
                              observer=JudgeMetricsObserver(self.metrics, "shadow"))
        self.shadow = ShadowJudge(engine, agreement=self.judge_agreement, live_judge=self.identity.identifier,
                                  book=self.labels.book,
                                  sample_rate=shadow.share, max_in_flight=shadow.max_in_flight,
                                  metrics=self.metrics,
                                  budget=DailyBudget(shadow.daily_budget_usd) if shadow.daily_budget_usd else None)
        self.judge_agreement.add_section("shadow", self.shadow.view)
        self._add_exporter("shadow", self.shadow)

    def _add_exporter(self, name: str, sink: ResultSink, *, grace_s: float = 0.0) -> None:
        """An exporter: a stage fed by the fan-out (`sink` must also be a Component)."""
        self.graph.add(name, sink, grace_s=grace_s)  # type: ignore[arg-type]
        self.graph.connect("fanout", name, "ResultSink")
        self.fanout.add(sink)

    def add_sink(self, sink: ResultSink) -> None:
        """Extra result sinks (e.g. an embedding app's own); they get every retrieval's outcome.
        They have no lifecycle here: whoever adds one starts and stops it."""
        self.fanout.add(sink)

    def _add_diagnostics(self) -> None:
        config = self.config.diagnostics
        if not config.enabled:
            return
        from ctxprec.collector.diagnostics.sink import DiagnosticsSink

        settings = config.settings(max_services=self.config.metrics.max_services,
                                   max_retrievers=self.config.metrics.max_retrievers)
        sink = self.diagnostics = DiagnosticsSink(settings, metrics=self.metrics, drift=self.drift,
                                                  redact=self._preview_redaction())
        self._add_exporter("diagnostics", sink)

        def hook_alarm() -> None:
            self.drift.on_alarm = sink.explainer

        self.graph.link("diagnostics", "drift", "the drift explainer names what is behind a rising alarm",
                        wire=hook_alarm)

    def _preview_redaction(self) -> Callable[[str], str] | None:
        """Text previews of noisy documents leave the process: not at all unless previews are on;
        with --redact-pii through the same redaction as the judge's prompts (the RedactingSink in
        front of the fan-out already applied it to the contexts; redacting is idempotent, and
        this keeps previews safe whatever feeds the sink); as they are otherwise."""
        if not self.config.diagnostics.previews:
            return None
        return redact_text if self.config.judge.redact_pii else _as_is

    def _add_write_back(self) -> None:
        export = self.config.export
        if export.forward_to is None:
            return
        if self.config.write_back == "span":
            from ctxprec.collector.exporters.otlp_sender import (
                LOGS,
                METRICS,
                OtlpSender,
                SenderSettings,
            )
            from ctxprec.collector.exporters.span_writeback import SpanWriteBack

            # The span forwarder's queue also carries the app's logs and metrics (signal_forward.py).
            sender = OtlpSender(SenderSettings.of(export, carries=(LOGS, METRICS)), metrics=self.metrics)
            self.writeback = SpanWriteBack(sender, self.identity, metrics=self.metrics, threshold=export.threshold,
                                           hold_deadline_s=export.hold_deadline_s)
            self._add_exporter("span_writeback", self.writeback, grace_s=FORWARD_GRACE_S)
        else:
            from ctxprec.collector.exporters.evaluator import (
                EvaluatorExporter,
                EvaluatorSettings,
            )

            self.evaluator = EvaluatorExporter(EvaluatorSettings.of(export), self.identity, metrics=self.metrics,
                                               version=VERSION)
            self._add_exporter("evaluator", self.evaluator, grace_s=EXPORTER_GRACE_S)

    def _add_signal_forwarder(self) -> None:
        """The app's OTLP logs and metrics, through the forward queue the spans use (or counted as
        dropped without --forward-to)."""
        from ctxprec.collector.exporters.signal_forward import SignalForwarder

        owner = "span_writeback" if self.writeback is not None else "evaluator" if self.evaluator is not None else None
        sender = (self.writeback.sender if self.writeback is not None
                  else self.evaluator.sender if self.evaluator is not None else None)
        self.signal_forwarder: SignalForwarder = SignalForwarder(sender, metrics=self.metrics)
        self.graph.add("signal_forwarder", self.signal_forwarder)
        if owner is not None:
            # Finished before the queue's owner flushes it.
            self.graph.connect("signal_forwarder", owner, "shares its forward queue")

    def _add_backend_sinks(self) -> None:
        """`--sink`: scores into backends' own stores (Phoenix annotations, Langfuse scores)."""
        if not self.config.export.sinks:
            return
        from ctxprec.collector.exporters.sinks import SinkSettings, build_sinks

        self.sinks = build_sinks(SinkSettings.of(self.config.export), self.identity, self.metrics)
        for sink in self.sinks:
            name = f"sink_{sink.name}"
            self._add_exporter(name, sink, grace_s=FORWARD_GRACE_S)
            if self.writeback is not None:
                # Side by side with each other, after the forwarded spans: an annotation needs its
                # span stored in the backend first.
                self.graph.connect("span_writeback", name, "its span is forwarded before its annotation")

    def _add_ingest(self) -> OtlpIngest:
        from ctxprec.collector.assembly.ingest import IngestSettings, OtlpIngest

        settings = IngestSettings(conventions=self.config.conventions, buffer=self.config.assembly)
        ingest = OtlpIngest(keep_trace=self.sampler.keep_trace, sink=self.gate, metrics=self.metrics,
                            settings=settings, passthrough=self.writeback, signals=self.signal_forwarder)
        self.graph.add("ingest", ingest)
        self.graph.connect("ingest", "gate", "RetrievalSink")
        self.graph.connect("ingest", "signal_forwarder", "SignalPassThrough")
        if self.writeback is not None:
            self.graph.connect("ingest", "span_writeback", "SpanPassThrough")
        return ingest

    def _add_receivers(self) -> None:
        config, limits = self.config.receivers, self.config.listeners
        grpc = config.grpc(limits)
        if grpc is not None:
            from ctxprec.collector.receivers.otlp_grpc import OtlpGrpcReceiver

            self._add_receiver("otlp_grpc", OtlpGrpcReceiver(self.ingest, metrics=self.metrics, settings=grpc,
                                                             signals=self.ingest))
        http = config.http(limits)
        if http is not None:
            from ctxprec.collector.receivers.otlp_http import OtlpHttpReceiver

            receiver = OtlpHttpReceiver(self.ingest, metrics=self.metrics, settings=http, signals=self.ingest)
            self.listener_guards.append(receiver.guard)
            self._add_receiver("otlp_http", receiver)

    def _add_receiver(self, name: str, receiver: OtlpGrpcReceiver | OtlpHttpReceiver) -> None:
        async def listening() -> bool:
            return receiver.listening

        self.receivers.append(receiver)
        self.graph.add(name, receiver, ready=Readiness(type(receiver).__name__, listening))
        self.graph.connect(name, "ingest", "TraceConsumer, SignalConsumer")

    def _add_kafka(self) -> None:
        kafka = self.config.kafka
        learning = self.config.cluster.enabled(kafka_input=kafka.enabled, results_topic=kafka.results_topic)
        if not kafka.enabled:
            return
        from ctxprec.collector.receivers.kafka import KafkaReceiver

        graph = self.graph
        self.replica = new_replica_id() if learning else None
        results_topic = kafka.results()
        if results_topic is not None:
            from ctxprec.collector.exporters.kafka_results import KafkaResultsExporter

            diagnostics = self.config.diagnostics
            self.kafka_results = KafkaResultsExporter(
                results_topic, self.metrics, replica=self.replica,
                slice_attributes=diagnostics.slice_attributes if diagnostics.enabled else ())
            self._add_exporter("kafka_results", self.kafka_results, grace_s=KAFKA_RESULTS_GRACE_S)
        diagnostics_topic = kafka.diagnostics()
        if diagnostics_topic is not None:
            if self.diagnostics is None:
                raise ValueError("kafka.diagnostics_topic needs the diagnostics on (--diagnostics on)")
            from ctxprec.collector.exporters.kafka_diagnostics import KafkaDiagnosticsExporter

            sink = self.diagnostics
            self.kafka_diagnostics = KafkaDiagnosticsExporter(
                diagnostics_topic, lambda: sink.documents_json({}).body, self.metrics,
                interval_s=kafka.diagnostics_interval_s)
            # After scoring finished: its last round counts every score.
            graph.add("kafka_diagnostics", self.kafka_diagnostics, grace_s=EXPORTER_GRACE_S)
            graph.connect("diagnostics", "kafka_diagnostics", "noisy-document summaries")
        # rag_event: retrievals straight to the gate, whose sampler the byte peek asks.
        rag_event = kafka.format == "rag_event"
        settings = kafka.receiver(self.config.scoring.queue_size)
        receiver = self.kafka_receiver = KafkaReceiver(settings, sink=self.gate, metrics=self.metrics,
                                                       ingest=None if rag_event else self.ingest,
                                                       sampler=self.sampler)

        async def ready() -> bool:
            return receiver.ready

        graph.add("kafka", receiver, ready=Readiness("kafka", ready))
        graph.connect("kafka", "gate" if rag_event else "ingest", "RetrievalSink" if rag_event else "TraceConsumer")
        graph.link("kafka", "fanout", "each retrieval carries its message's ack; the fan-out releases it")
        results = self.kafka_results
        if results is not None:
            graph.link("kafka_results", "kafka", "score records are flushed before each commit",
                       wire=lambda: receiver.commit_after(results.flush))
        if learning and results_topic is not None:
            self._add_cluster_feed(results_topic, receiver)

    def _add_cluster_feed(self, results_topic: KafkaTopic, receiver: KafkaReceiver) -> None:
        """Cluster learning: the other replicas' scores, read back from the results topic, feed this
        replica's drift monitor (hence its adaptive sampling) and diagnostics; one replica, the
        owner of the input topic's partition 0, publishes the Kafka diagnostics for the cluster."""
        from aiokafka import TopicPartition
        from ctxprec.collector.cluster.feed import ClusterFeed

        assert self.replica is not None
        graph = self.graph
        feed = self.cluster_feed = ClusterFeed(
            results_topic, replica=self.replica, model=self.identity.model, prompt_version=self.identity.prompt_version,
            metrics=self.metrics, max_lag_records=self.config.cluster.max_lag_records)
        graph.add("cluster_feed", feed)
        graph.connect("cluster_feed", "drift", "PeerScores")
        feed.sinks.append(self.drift)
        if self.diagnostics is not None:
            graph.connect("cluster_feed", "diagnostics", "PeerScores")
            feed.sinks.append(self.diagnostics)
        exporter = self.kafka_diagnostics
        if exporter is not None:
            first = TopicPartition(receiver.settings.topic, 0)

            def publish_once() -> None:
                exporter.publishing = lambda: first in receiver.assignment

            graph.link("kafka", "kafka_diagnostics", "the owner of the input's partition 0 publishes for the cluster",
                       wire=publish_once)

    def _add_metrics_server(self) -> None:
        config = self.config.metrics
        if config.listen is None:
            return
        host, port = config.listen
        server = self.metrics_server = MetricsServer(self.metrics, host=host, port=port,
                                                     security=config.security(), metrics_open=config.open,
                                                     limits=self.config.listeners)
        self.listener_guards.append(server.guard)
        graph = self.graph
        # An extension: up once every stage started, answering until every stage stopped.
        graph.add("metrics_server", server, extension=True)
        # The judge's check last: a failing input is the likelier thing to look at first.
        for stage in sorted(graph.stages.values(), key=lambda s: s.name == "engine"):
            if stage.ready is not None:
                server.add_check(stage.ready.name, stage.ready.check)
        # What assembly saw and did not take (assembly/silence.py): served whatever --diagnostics
        # says, it holds names of services and tools, no documents.
        server.add_json_route("/diagnostics/conventions", self.ingest.stats.view,
                              "per service: the spans each convention read as retrievals, the tool calls seen and "
                              "not taken (why, and the setting that would take them), the LLM spans of traces "
                              "without a retrieval (?service=)")
        server.add_post_route("/labels", self.labels.post)
        # A judge change acknowledged: ctxprec_judge_changed back to 0 and a new canary baseline
        # taken from the judge as it answers now (a body, if any, is ignored).
        server.add_post_route("/diagnostics/judge/acknowledge", lambda body, content_type: self._acknowledge_judge())
        # Agreement numbers only, no documents: served whatever --diagnostics says.
        server.add_json_route("/diagnostics/judge", self.judge_agreement.view,
                              "per judge fingerprint: labelled contexts, agreement, Cohen's kappa with its 95% "
                              "interval, precision and recall of relevant, the confusion counts, against human "
                              "labels or the live judge (?judge=&against=)")
        sink = self.diagnostics
        if sink is not None:
            server.add_json_route("/diagnostics/documents", sink.documents_json,
                                  "the documents most often retrieved and judged irrelevant, per service and "
                                  "retriever (?service=&retriever=&limit=)")
            server.add_json_route("/diagnostics/drift", sink.drift_json,
                                  "per service: whether precision drifted, the levels before and after, and the "
                                  "retriever and attribute values behind it (?service=)")
            server.add_json_route("/diagnostics/top_k", sink.top_k_json,
                                  "per service and retriever: the smallest top-k keeping 95% of the relevant "
                                  "contexts, and the curve (?service=&retriever=)")

    def _acknowledge_judge(self) -> JsonResponse:
        if self.canary is not None:
            self.canary.acknowledge()
            return JsonResponse(202, {"acknowledged": True, "new_baseline": "being taken"})
        self.judge_watch.cleared("acknowledged")
        return JsonResponse(200, {"acknowledged": True, "new_baseline": None})

    # -- what the stages report --

    @property
    def shared_cache(self) -> bool:
        """A verdict cache shared by replicas is in use (the local judge keeps no cache)."""
        return bool(self.config.judge.cache_url) and self.engine.model != "local"

    def _receiver_names(self) -> list[str]:
        r = self.config.receivers
        names = [name for name, listen in (("otlp_grpc", r.otlp_grpc), ("otlp_http", r.otlp_http)) if listen is not None]
        return names + (["kafka"] if self.config.kafka.enabled else [])

    def _spans_received(self) -> float:
        return sum(sample.value for family in self.metrics.spans_received.collect() for sample in family.samples
                   if sample.name.endswith("_total"))

    def failure_logs(self) -> list[Flushes]:
        logs: list[Flushes] = [self.judge_failures]
        logs.extend(guard.failures for guard in self.listener_guards)
        if self.writeback is not None:
            logs.append(self.writeback.sender.failures)
        if self.evaluator is not None:
            logs.extend(self.evaluator.failure_logs())
        if self.cluster_feed is not None:
            logs.append(self.cluster_feed.failures)
        repeated = repeated_lines()
        if repeated is not None:
            logs.append(repeated)
        if self.resolver is not None:
            logs.extend(source.failures for source in self.resolver.sources)
        return logs

    @property
    def activity_interval_s(self) -> float:
        return self.activity.interval_s

    @activity_interval_s.setter
    def activity_interval_s(self, seconds: float) -> None:
        self.activity.interval_s = seconds

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
        return anonymous_rss_bytes() + (child() if child is not None else 0)

    @property
    def otlp_grpc_port(self) -> int | None:
        return next((r.port for r in self.receivers if type(r).__name__ == "OtlpGrpcReceiver"), None)

    @property
    def otlp_http_port(self) -> int | None:
        return next((r.port for r in self.receivers if type(r).__name__ == "OtlpHttpReceiver"), None)

    @property
    def metrics_url(self) -> str | None:
        return self.metrics_server.url if self.metrics_server is not None else None

    # -- lifecycle --

    async def start(self) -> None:
        """In the graph's start order (consumers first: nothing is accepted before it can be
        handled); the engine's start does the judge client's one-time work, so that the first
        scores do not pay for it."""
        await self.graph.start()

    async def stop(self) -> None:
        """Every stage finishes within `--shutdown-timeout` (plus its grace), then closes."""
        await self.graph.stop(Deadline.after(self.config.scoring.shutdown_timeout_s))

    async def __aenter__(self) -> "Pipeline":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def placement_of(config: ServeConfig) -> Placement:
    """Where scoring runs is decided from these settings only."""
    return Placement(judge=config.judge.judge_config(), scale=config.judge.scale, process=config.scoring.process,
                     reads_kafka=config.kafka.enabled, log_level=config.log_level)


def _as_is(text: str) -> str:
    return text
