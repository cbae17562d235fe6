"""Every Prometheus metric the sidecar exposes, in one place (listed in docs/METRICS.md,
generated from this file).

Each `Metrics` owns its own `CollectorRegistry`, so several sidecars (tests, the demo) can live
in one process. `service` and `retriever` label values go through `LabelCap`, which keeps the
first N distinct values and folds the rest into `other`, and every family holds at most
`max_series` series (children.py: the budget; label tuples past it are folded into `other`)."""
from __future__ import annotations

from typing import Iterable

from ctxprec.collector.metrics.children import LabelCap, SeriesBudget
from ctxprec.collector.metrics.config import MetricsConfig
from ctxprec.collector.version import VERSION
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# No `_created` series beside every counter and histogram: a second series per child that no
# rule or panel reads, doubling what a scrape carries. prometheus-client's own switch, process-wide.
disable_created_metrics()

SCORE_BUCKETS = tuple(round(i / 10, 1) for i in range(1, 11))
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
RESOLVER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
DELAY_BUCKETS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# Every reason each receiver can count an error for (the receivers and assembly name them), so
# that the configured receivers' series exist at 0 from the start, as Prometheus recommends:
# a panel then shows 0, not "no data", and rate() sees the first error.
RECEIVER_ERROR_REASONS: dict[str, tuple[str, ...]] = {
    "otlp_http": ("unauthenticated", "too_large", "too_many_spans", "timeout", "bad_body", "unsupported_media_type",
                  "internal", "invalid_trace_id"),
    "otlp_grpc": ("unauthenticated", "too_large", "too_many_spans", "bad_body", "internal", "invalid_trace_id"),
    "kafka": ("empty", "too_large", "bad_json", "bad_event", "bad_body", "ingest_error", "invalid_trace_id"),
}


# The label values of the resolver's metrics (collector/resolving/), each a fixed set.
RESOLVER_LOOKUP_OUTCOMES = ("ok", "timeout", "error", "breaker_open")
RESOLVER_ID_OUTCOMES = ("cached", "found", "missing", "failed")
RESOLVER_REASONS = ("missing", "timeout", "error")


def rank_label(rank: int) -> str:
    """1-based rank as a label: 1..20, then `21+` (bounded cardinality)."""
    return str(rank) if rank <= 20 else "21+"


_CAPS = MetricsConfig()


class Metrics:
    def __init__(self, *, max_services: int = _CAPS.max_services, max_retrievers: int = _CAPS.max_retrievers,
                 max_series: int = _CAPS.max_series_per_metric, version: str = VERSION) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.service = LabelCap(max_services)
        self.retriever = LabelCap(max_retrievers)
        # (Counted in ctxprec_metric_series_folded_total, made with the operational counters below.)
        self.budget = SeriesBudget(max_series, lambda name: self.series_folded.labels(metric=name).inc())

        # -- scores, judge, drift --
        self.spans_received = Counter("ctxprec_spans_received", "Spans received, by receiver.", ["receiver"], registry=r)
        # The other OTLP signals, passed on to --forward-to (counted as exporters log_forwarder and
        # metric_forwarder in ctxprec_exported_spans_total / ctxprec_export_dropped_total).
        self.log_records_received = Counter(
            "ctxprec_log_records_received", "OTLP log records received, by receiver.", ["receiver"], registry=r)
        self.metric_points_received = Counter(
            "ctxprec_metric_data_points_received", "OTLP metric data points received, by receiver.", ["receiver"],
            registry=r)
        self.samples = Counter("ctxprec_samples", "Retrievals by final decision.", ["service", "decision"], registry=r)
        self.context_precision = Histogram(
            "ctxprec_context_precision", "Context precision (MAP) per scored retrieval, divided by scale.",
            ["service", "retriever"], buckets=SCORE_BUCKETS, registry=r)
        self.precision_at_k = Histogram(
            "ctxprec_precision_at_k", "Fraction of retrieved contexts judged relevant.",
            ["service", "retriever"], buckets=SCORE_BUCKETS, registry=r)
        self.rank_judged = Counter(
            "ctxprec_rank_judged", "Contexts judged, by 1-based rank and relevance.",
            ["service", "rank", "relevant"], registry=r)
        # A sudden rise of `query` means answers stopped being found in the traces (the app's
        # instrumentation changed): scores then judge contexts against the question alone.
        self.reference_kind = Counter(
            "ctxprec_reference_kind", "Scored retrievals by what relevance was judged against.",
            ["service", "reference_kind"], registry=r)
        # `judge`: live (the judge whose verdicts are published), canary (the live judge's model
        # re-judging the canary set, collector/canary/) or shadow (a candidate judge, collector/shadow/).
        self.judge_requests = Counter("ctxprec_judge_requests", "Judge HTTP attempts by outcome.",
                                      ["model", "outcome", "judge"], registry=r)
        self.judge_latency = Histogram(
            "ctxprec_judge_latency_seconds", "Judge request latency.", ["model", "judge"], buckets=LATENCY_BUCKETS,
            registry=r)
        self.judge_tokens = Counter("ctxprec_judge_tokens", "Judge tokens.", ["model", "kind", "judge"], registry=r)
        self.judge_cost = Counter("ctxprec_judge_cost_usd", "Judge cost in USD (litellm cost map).", ["model", "judge"],
                                  registry=r)
        # The canary (collector/canary/): a set of samples re-judged on a schedule.
        self.judge_changed = Gauge(
            "ctxprec_judge_changed", "1 once the canary's verdicts moved beyond the judge's own run-to-run variation "
            "(or its fingerprint changed), until acknowledged (POST /diagnostics/judge/acknowledge) or a new "
            "baseline is taken.", registry=r)
        self.judge_canary_moved = Gauge(
            "ctxprec_judge_canary_moved_contexts", "Canary contexts whose verdict differed from the baseline in the "
            "last canary round.", registry=r)
        self.judge_canary_allowed = Gauge(
            "ctxprec_judge_canary_allowed_contexts", "Canary contexts that may move in a round before the judge is "
            "said to have changed (from the run-to-run variation measured at the baseline).", registry=r)
        self.judge_canary_rounds = Counter(
            "ctxprec_judge_canary_rounds", "Canary rounds, by outcome (unchanged, changed, baseline, failed, "
            "skipped_budget).", ["outcome"], registry=r)
        # The shadow judge (collector/shadow/): a candidate judging a share of the sampled retrievals.
        self.shadow_samples = Counter(
            "ctxprec_shadow_samples", "Scored retrievals offered to the shadow judge, by outcome (judged, failed; "
            "skipped_busy, skipped_budget: over its own budget, left unjudged).", ["outcome"], registry=r)
        # The local judge's contexts judged without word rules: a rise means traffic in a language
        # it does not support, or contexts in another language than the answers.
        self.local_judge_fallback = Counter(
            "ctxprec_local_judge_fallback",
            "Contexts the local judge judged by its language-independent fallback, by reason.", ["reason"], registry=r)
        self.score_delay = Histogram(
            "ctxprec_score_delay_seconds", "Time from retrieval end to score ready.", buckets=DELAY_BUCKETS, registry=r)
        self.queue_depth = Gauge("ctxprec_queue_depth", "Retrievals waiting for a scoring worker.", registry=r)
        self.traces_buffered = Gauge("ctxprec_traces_buffered", "Sampled traces being assembled.", registry=r)
        self.precision_baseline = Gauge(
            "ctxprec_precision_baseline", "Drift detector's slow baseline; while alarmed, the level before the drift.",
            ["service"], registry=r)
        self.precision_recent = Gauge(
            "ctxprec_precision_recent", "Drift detector's recent mean; while alarmed, the mean since the drift began.",
            ["service"], registry=r)
        self.precision_drift = Gauge("ctxprec_precision_drift", "1 while the drift detector is alarmed.", ["service"], registry=r)
        # Set by the diagnostics (collector/diagnostics/sink.py); NaN until enough relevant contexts were seen.
        self.recommended_k = Gauge(
            "ctxprec_recommended_k", "Smallest top-k keeping 95% of the relevant contexts seen.",
            ["service", "retriever"], registry=r)
        self.recommended_k_saved_tokens = Gauge(
            "ctxprec_recommended_k_saved_tokens", "Context tokens per request that cutting to the recommended k saves (chars / 4).",
            ["service", "retriever"], registry=r)
        # How far to trust the judge (collector/judging/, docs/JUDGES.md): per judge (its
        # fingerprint, `cp-` and 16 hex digits, as in score records) against people's labels
        # (`human`) or against the live judge (`live`, for a shadow judge), counted per context.
        # A few judges per process at most (live, shadow, each configuration change), so bounded.
        self.judge_labels = Counter(
            "ctxprec_judge_labels", "Labelled contexts compared with a judge's verdicts, by judge fingerprint and "
            "what it was compared against (human labels, or the live judge).", ["judge", "against"], registry=r)
        self.judge_agreement = Gauge(
            "ctxprec_judge_agreement_ratio", "Share of labelled contexts on which the judge agreed with the reference.",
            ["judge", "against"], registry=r)
        self.judge_kappa = Gauge(
            "ctxprec_judge_kappa", "Cohen's kappa of the judge against the reference (agreement beyond chance).",
            ["judge", "against"], registry=r)
        self.judge_kappa_lower = Gauge(
            "ctxprec_judge_kappa_lower", "Lower end of the 95% interval of ctxprec_judge_kappa.",
            ["judge", "against"], registry=r)
        self.judge_kappa_upper = Gauge(
            "ctxprec_judge_kappa_upper", "Upper end of the 95% interval of ctxprec_judge_kappa (the alert "
            "CtxprecJudgeDisagrees fires when it is under the threshold).", ["judge", "against"], registry=r)
        self.judge_kappa_threshold = Gauge(
            "ctxprec_judge_kappa_alert_threshold", "The setting judging.kappa_alert (--judge-kappa-alert): the alert "
            "CtxprecJudgeDisagrees fires when ctxprec_judge_kappa_upper is under it.", registry=r)
        self.judge_info = Gauge(
            "ctxprec_judge_info", "1 per judge seen: its fingerprint, model, prompt version and role (live, shadow, "
            "canary).", ["judge", "model", "prompt_version", "role"], registry=r)
        self.judge_labels_unmatched = Counter(
            "ctxprec_judge_labels_unmatched", "Human labels not compared with verdicts, by reason (evicted: the "
            "verdicts had left the verdict store; expired: they never came while the label waited; "
            "overflow: too many labels waiting; mismatch: the label's contexts do not fit the verdicts).",
            ["reason"], registry=r)
        self.build_info = Gauge("ctxprec_build_info", "Build information.", ["version"], registry=r)
        self.build_info.labels(version=version).set(1)

        # -- population estimates from sampled scores (docs/STATISTICS.md) --
        # Each score counts 1/rate times, so a service whose routes are sampled at different
        # rates averages over its traffic, not over its sample; the squares give the spread and
        # Kish's effective sample size, hence the recorded confidence bands.
        self.precision_weight = Counter(
            "ctxprec_context_precision_weight", "Sum of weights (1 / sample rate) of scored retrievals.",
            ["service", "retriever"], registry=r)
        self.precision_weighted_sum = Counter(
            "ctxprec_context_precision_weighted_sum", "Sum of weight * normalised score.",
            ["service", "retriever"], registry=r)
        self.precision_weighted_squares = Counter(
            "ctxprec_context_precision_weighted_squares", "Sum of weight * normalised score squared.",
            ["service", "retriever"], registry=r)
        self.precision_weight_squares = Counter(
            "ctxprec_context_precision_weight_squares", "Sum of squared weights (for the effective sample size).",
            ["service", "retriever"], registry=r)
        self.sample_rate = Gauge(
            "ctxprec_sample_rate", "Sample rate in force per service (raised while drift is suspected).",
            ["service"], registry=r)

        # -- operational counters (kept few, bounded labels) --
        self.series_folded = Counter(
            "ctxprec_metric_series_folded", "Updates counted under service or retriever `other` because their metric "
            "family (or the diagnostics) had used its series budget (--max-series-per-metric).", ["metric"], registry=r)
        self.receiver_errors = Counter(
            "ctxprec_receiver_errors", "Rejected input, by receiver and reason.", ["receiver", "reason"], registry=r)
        self.listener_refused = Counter(
            "ctxprec_listener_connections_refused",
            "Connections a listener closed or refused to protect itself, by listener and reason.",
            ["listener", "reason"], registry=r)
        self.trace_evictions = Counter(
            "ctxprec_trace_evictions", "Traces dropped from the assembly buffer, by reason.", ["reason"], registry=r)
        self.late_spans = Counter(
            "ctxprec_late_spans", "Spans that arrived after their trace was forgotten (past assembly.late_grace_s, or "
            "dropped from the buffer): forwarded, not read.", registry=r)
        self.late_spans_joined = Counter(
            "ctxprec_late_spans_joined", "Spans that joined their trace after it was complete (root seen and quiet, or "
            "max_wait_s since its first span), while it was kept (assembly.late_grace_s): read like any other.", registry=r)
        self.late_answers = Counter(
            "ctxprec_late_answers", "Retrievals decided without an LLM span's answer (after assembly.answer_wait_s) "
            "whose answer arrived later: scored against the query.", registry=r)
        self.resent_spans = Counter(
            "ctxprec_resent_spans", "Spans received again for a trace that held them already (an exporter's retry): "
            "forwarded as often as received, decided once.", registry=r)
        # Silence made visible (collector/assembly/silence.py): an app that calls a model and
        # retrieves in a way no convention reads gets no decision at all; these say so.
        self.llm_spans_without_retrieval = Counter(
            "ctxprec_llm_spans_without_retrieval", "LLM spans in sampled traces in which no retrieval was found, "
            "by service.", ["service"], registry=r)
        self.tool_spans_not_taken = Counter(
            "ctxprec_tool_spans_not_taken", "Tool-call spans seen and not read as retrievals, by service and tool "
            "name (50 names a service, then other).", ["service", "tool"], registry=r)
        self.late_log_records = Counter(
            "ctxprec_late_log_records", "GenAI event log records of a sampled trace that arrived after it was "
            "forgotten (past assembly.late_grace_s; the answer or prompt they carry was not read).", registry=r)
        self.contexts_dropped = Counter(
            "ctxprec_contexts_dropped", "Retrieved contexts beyond the per-retrieval cap, not scored.", registry=r)
        self.buffered_bytes = Gauge("ctxprec_buffered_bytes", "Approximate bytes held by the assembly buffer.", registry=r)
        self.exported_spans = Counter(
            "ctxprec_exported_spans", "Spans written downstream, by exporter and outcome (log records for "
            "log_forwarder and evaluator_logs, data points for metric_forwarder).", ["exporter", "outcome"], registry=r)
        self.export_dropped = Counter(
            "ctxprec_export_dropped", "Spans or records dropped by an exporter, by reason (log records for "
            "log_forwarder and evaluator_logs, data points for metric_forwarder).", ["exporter", "reason"], registry=r)
        self.kafka_lag = Gauge("ctxprec_kafka_consumer_lag", "Kafka consumer lag in messages.", ["topic", "partition"], registry=r)
        self.kafka_dead_letters = Counter(
            "ctxprec_kafka_dead_letters", "Kafka messages sent to the dead-letter topic, by reason.", ["reason"], registry=r)
        self.kafka_messages = Counter("ctxprec_kafka_messages", "Kafka messages consumed, by format.", ["format"], registry=r)
        # Cluster learning (collector/cluster/feed.py): the other replicas' score records read back.
        self.cluster_records = Counter(
            "ctxprec_cluster_records", "Score records read back from the Kafka results topic, by outcome "
            "(applied: another replica's score learned from).", ["outcome"], registry=r)
        self.cluster_feed_delay = Gauge(
            "ctxprec_cluster_feed_delay_seconds", "Age of the last other replica's score learned from, when it was read.",
            registry=r)
        self.kafka_diagnostics_publisher = Gauge(
            "ctxprec_kafka_diagnostics_publisher", "1 while this replica publishes the Kafka diagnostics topic "
            "for the cluster.", registry=r)
        # The verdict cache shared by replicas (scorer/judge/shared_cache.py), per context looked up or stored.
        self.shared_cache = Counter(
            "ctxprec_judge_shared_cache", "Contexts looked up in (read) or stored to (write) the shared verdict "
            "cache, by outcome.", ["operation", "outcome"], registry=r)
        self.shared_cache_breaker = Counter(
            "ctxprec_judge_shared_cache_breaker_opened", "Times the shared verdict cache was set aside after "
            "failures (its store is not asked until a probe succeeds).", registry=r)
        # The document resolvers (collector/resolving/), per configured source (a bounded set).
        self.resolver_lookups = Counter(
            "ctxprec_resolver_lookups", "Batched lookups of document texts by id, by source and outcome "
            "(ok, timeout, error; breaker_open: not asked while its circuit breaker is open).",
            ["source", "outcome"], registry=r)
        self.resolver_ids = Counter(
            "ctxprec_resolver_ids", "Document ids to resolve, by source and outcome (cached: answered from the "
            "cache; found, missing: by a lookup; failed: the lookup timed out or failed).", ["source", "outcome"],
            registry=r)
        self.resolver_latency = Histogram(
            "ctxprec_resolver_lookup_seconds", "Latency of one batched lookup, by source.", ["source"],
            buckets=RESOLVER_BUCKETS, registry=r)
        self.resolver_unresolved = Counter(
            "ctxprec_resolver_unresolved", "Retrievals decided `unresolved`, by source and reason (missing: an id "
            "the store does not hold; timeout; error: the store failed or its breaker is open).",
            ["source", "reason"], registry=r)
        self.resolver_source_up = Gauge(
            "ctxprec_resolver_source_up", "1 while a source answers lookups, 0 while it fails (or its breaker is "
            "open).", ["source"], registry=r)
        self.resolver_cache_bytes = Gauge(
            "ctxprec_resolver_cache_bytes", "Bytes of resolved texts held for reuse.", registry=r)

    def signal_received(self, signal: str, receiver: str) -> Counter:
        """The receipt counter of an OTLP signal (`traces`, `logs`, `metrics`) for `receiver`."""
        family = {"traces": self.spans_received, "logs": self.log_records_received,
                  "metrics": self.metric_points_received}[signal]
        return family.labels(receiver=receiver)

    def start_at_zero(self, *, receivers: Iterable[str], judge_model: str, judge_outcomes: Iterable[str],
                      fallback_reasons: Iterable[str] = (), cluster_outcomes: Iterable[str] = (),
                      shared_cache_outcomes: Iterable[tuple[str, str]] = (),
                      resolver_sources: Iterable[str] = ()) -> None:
        """Create, at 0, the series whose label values are all known at start: errors of the
        configured receivers by reason (and the OTLP receivers' log records and data points), the
        configured judge's requests by outcome (and its latency histogram), for the local judge its
        fallbacks by reason, with cluster learning its records by outcome, with a shared verdict
        cache its reads and writes by outcome, with document resolvers each source's lookups, ids
        and unresolved retrievals. Series labelled by service appear with their service."""
        for receiver in receivers:
            for reason in RECEIVER_ERROR_REASONS.get(receiver, ()):
                self.receiver_errors.labels(receiver=receiver, reason=reason)
            if receiver.startswith("otlp_"):  # logs and metrics come over OTLP only
                self.signal_received("logs", receiver)
                self.signal_received("metrics", receiver)
        for outcome in judge_outcomes:
            self.judge_requests.labels(model=judge_model, outcome=outcome, judge="live")
        self.judge_latency.labels(model=judge_model, judge="live")
        for reason in fallback_reasons:
            self.local_judge_fallback.labels(reason=reason)
        for outcome in cluster_outcomes:
            self.cluster_records.labels(outcome=outcome)
        for operation, outcome in shared_cache_outcomes:
            self.shared_cache.labels(operation=operation, outcome=outcome)
        for source in resolver_sources:
            for outcome in RESOLVER_LOOKUP_OUTCOMES:
                self.resolver_lookups.labels(source=source, outcome=outcome)
            for outcome in RESOLVER_ID_OUTCOMES:
                self.resolver_ids.labels(source=source, outcome=outcome)
            for reason in RESOLVER_REASONS:
                self.resolver_unresolved.labels(source=source, reason=reason)
            self.resolver_latency.labels(source=source)
