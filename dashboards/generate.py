"""Builds the Grafana dashboards (JSON model) from code, so that every panel follows one pattern.

    .venv/bin/python -m dashboards.generate          # rewrites dashboards/*.json
    .venv/bin/python -m dashboards.generate --check  # exit 1 when a JSON file is out of date

Every panel queries the Prometheus datasource chosen by the `datasource` variable and honours the
`service` and `retriever` variables where the metric carries those labels. Queries use the
recording rules of deploy/prometheus/rules/ where one exists."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
DS: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
SVC = 'service=~"$service"'
SVC_RET = 'service=~"$service", retriever=~"$retriever"'


@dataclass
class Target:
    expr: str
    legend: str = ""
    instant: bool = False
    fmt: str = "time_series"  # time_series | table | heatmap
    exemplar: bool = False


@dataclass
class Panel:
    title: str
    kind: str  # timeseries | stat | heatmap | table | bargauge | state-timeline
    targets: list[Target]
    w: int = 12
    h: int = 8
    unit: str = "short"
    description: str = ""
    minmax: tuple[float, float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    overrides: list[dict[str, Any]] = field(default_factory=list)


def _variables(with_retriever: bool) -> list[dict[str, Any]]:
    def query_var(name: str, label: str, query: str) -> dict[str, Any]:
        return {
            "name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"{name}-values", "qryType": 1},
            "definition": query, "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1, "options": [],
            "hide": 0, "regex": "", "skipUrlSync": False,
        }

    variables = [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "includeAll": False, "multi": False, "options": [], "refresh": 1,
         "regex": "", "skipUrlSync": False},
        query_var("service", "Service", "label_values(ctxprec_samples_total, service)"),
    ]
    if with_retriever:
        variables.append(query_var(
            "retriever", "Retriever", 'label_values(ctxprec_context_precision_count{service=~"$service"}, retriever)'))
    return variables


def _panel_json(panel: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit, **panel.defaults}
    if panel.minmax:
        defaults["min"], defaults["max"] = panel.minmax
    targets = []
    for i, t in enumerate(panel.targets):
        target: dict[str, Any] = {"refId": chr(ord("A") + i), "datasource": DS, "expr": t.expr,
                                  "legendFormat": t.legend or "__auto", "range": not t.instant,
                                  "instant": t.instant, "format": t.fmt, "editorMode": "code"}
        if t.exemplar:
            target["exemplar"] = True
        targets.append(target)
    return {
        "id": pid, "type": panel.kind, "title": panel.title, "description": panel.description,
        "datasource": DS, "gridPos": {"x": x, "y": y, "w": panel.w, "h": panel.h},
        "targets": targets, "fieldConfig": {"defaults": defaults, "overrides": panel.overrides},
        "options": panel.extra,
    }


def dashboard(uid: str, title: str, description: str, panels: list[Panel], *, with_retriever: bool = True,
              links_to: list[str] | None = None) -> dict[str, Any]:
    laid: list[dict[str, Any]] = []
    x = y = row_h = 0
    for pid, panel in enumerate(panels, start=1):
        if x + panel.w > 24:
            x, y, row_h = 0, y + row_h, 0
        laid.append(_panel_json(panel, pid, x, y))
        x += panel.w
        row_h = max(row_h, panel.h)
    return {
        "uid": uid, "title": title, "description": description, "tags": ["ctxprec", "rag"],
        "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True, "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "30s", "timezone": "",
        "fiscalYearStartMonth": 0, "liveNow": False, "weekStart": "",
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                                  "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"type": "dashboards", "tags": ["ctxprec"], "asDropdown": False, "title": "ctxprec",
                   "includeVars": True, "keepTime": True}] if links_to is None else links_to,
        "templating": {"list": _variables(with_retriever)},
        "panels": laid,
    }


_LEGEND = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
           "tooltip": {"mode": "multi", "sort": "none"}}
_DRIFT_MAPPING = [{"type": "value", "options": {
    "0": {"text": "stable", "color": "green", "index": 0},
    "1": {"text": "DRIFT", "color": "red", "index": 1}}}]


def _line_style(pattern: str, dash: list[int], width: int = 1) -> dict[str, Any]:
    """Series whose legend matches `pattern` drawn as thin dashed lines (band edges, baselines)."""
    return {"matcher": {"id": "byRegexp", "options": pattern}, "properties": [
        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": dash}},
        {"id": "custom.lineWidth", "value": width}]}


def _band_panel() -> Panel:
    # One line per service/retriever for the mean and dashed lines for its band: Grafana can only
    # shade between two named series, and the names here depend on the variables.
    return Panel("Context precision with its 95% band (1h)", "timeseries", [
        Target(f"ctxprec:context_precision_ci95_high:1h{{{SVC_RET}}}", "{{service}}/{{retriever}} 95% high"),
        Target(f"ctxprec:context_precision_mean:1h{{{SVC_RET}}}", "{{service}}/{{retriever}} mean (1h)"),
        Target(f"ctxprec:context_precision_ci95_low:1h{{{SVC_RET}}}", "{{service}}/{{retriever}} 95% low"),
        Target(f"ctxprec:context_precision_ci95_low:7d{{{SVC_RET}}}", "{{service}}/{{retriever}} baseline low (7d)"),
    ], w=16, h=9, unit="percentunit", minmax=(0, 1), extra=_LEGEND,
        overrides=[_line_style(".* 95% (high|low)$", [6, 4]), _line_style(".* baseline low \\(7d\\)$", [2, 4])],
        description="Mean precision of the traffic (scores weighted by 1 / sample rate) and its 95% "
                    "confidence band, over the last hour. CtxprecPrecisionDrop fires when the band's top "
                    "stays under the 7-day baseline's bottom (dotted) with at least 30 effective scores. "
                    "docs/STATISTICS.md says how the band is computed.")


def _n_eff_panel() -> Panel:
    return Panel("Effective number of scores (1h)", "stat",
                 [Target(f"ctxprec:context_precision_n_eff:1h{{{SVC_RET}}}", "{{service}}/{{retriever}}", instant=True)],
                 w=8, h=9, unit="short",
                 description="Kish's effective sample size behind the 1h estimate: (sum of weights)^2 / "
                             "sum of squared weights. Below 30 the drop alert stays silent.",
                 extra={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "background", "graphMode": "area", "textMode": "value_and_name"},
                 defaults={"decimals": 0, "thresholds": {"mode": "absolute", "steps": [
                     {"color": "orange", "value": None}, {"color": "green", "value": 30}]}})


def overview() -> dict[str, Any]:
    panels = [
        Panel("Context precision now (5m)", "stat",
              [Target(f"service:ctxprec_context_precision:mean5m{{{SVC}}}", "{{service}}", instant=True)],
              w=8, h=5, unit="percentunit", minmax=(0, 1),
              description="Mean context precision (MAP) of the last 5 minutes, per service.",
              extra={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                     "colorMode": "background", "graphMode": "area", "textMode": "value_and_name"},
              defaults={"thresholds": {"mode": "absolute", "steps": [
                  {"color": "red", "value": None}, {"color": "orange", "value": 0.5},
                  {"color": "green", "value": 0.75}]}}),
        Panel("Drift detector", "stat",
              [Target(f"max by (service) (ctxprec_precision_drift{{{SVC}}})", "{{service}}", instant=True)],
              w=8, h=5, description="1 while the sidecar's sequential drift detector is alarmed.",
              extra={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                     "colorMode": "background", "graphMode": "none", "textMode": "value_and_name"},
              defaults={"mappings": _DRIFT_MAPPING, "thresholds": {"mode": "absolute", "steps": [
                  {"color": "green", "value": None}, {"color": "red", "value": 1}]}}),
        Panel("Scores per second", "stat",
              [Target(f'sum by (service) (rate(ctxprec_samples_total{{{SVC}, decision="evaluated"}}[$__rate_interval]))',
                      "{{service}}", instant=True)],
              w=8, h=5, unit="reqps",
              extra={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                     "colorMode": "none", "graphMode": "area", "textMode": "value_and_name"}),
        Panel("Context precision against the 7-day baseline", "timeseries", [
            Target(f"service_retriever:ctxprec_context_precision:mean5m{{{SVC_RET}}}", "{{service}}/{{retriever}} (5m)"),
            Target(f"service_retriever:ctxprec_context_precision:mean1h{{{SVC_RET}}}", "{{service}}/{{retriever}} (1h)"),
            Target(f"service_retriever:ctxprec_context_precision:mean7d{{{SVC_RET}}}", "{{service}}/{{retriever}} baseline (7d)"),
        ], w=16, h=9, unit="percentunit", minmax=(0, 1), extra=_LEGEND,
            description="Mean precision of the scored sample, from the histogram (_sum/_count) across "
                        "replicas. The band panel below weights each score by its sample rate."),
        Panel("Firing ctxprec alerts", "table",
              [Target('ALERTS{alertname=~"Ctxprec.*", alertstate="firing"}', instant=True, fmt="table")],
              w=8, h=9, extra={"showHeader": True, "cellHeight": "sm"},
              description="Alerts from deploy/prometheus/rules currently firing."),
        _band_panel(),
        _n_eff_panel(),
        Panel("Precision distribution", "heatmap",
              [Target(f"sum by (le) (increase(ctxprec_context_precision_bucket{{{SVC_RET}}}[$__rate_interval]))",
                      "{{le}}", fmt="heatmap")],
              w=12, h=9, description="Scored retrievals per precision bucket (0.1 steps).",
              extra={"calculate": False, "cellGap": 1, "yAxis": {"axisPlacement": "left", "unit": "percentunit"},
                     "color": {"mode": "scheme", "scheme": "Oranges", "fill": "dark", "scale": "exponential",
                               "exponent": 0.5, "steps": 64, "reverse": False},
                     "rowsFrame": {"layout": "auto"}, "tooltip": {"mode": "single", "yHistogram": False},
                     "legend": {"show": True}, "exemplars": {"color": "rgba(255,0,255,0.7)"}}),
        Panel("Drift detector: recent mean against its baseline", "timeseries", [
            Target(f"avg by (service) (ctxprec_precision_recent{{{SVC}}})", "{{service}} recent"),
            Target(f"avg by (service) (ctxprec_precision_baseline{{{SVC}}})", "{{service}} baseline"),
            Target(f"max by (service) (ctxprec_precision_drift{{{SVC}}})", "{{service}} drift"),
        ], w=12, h=9, unit="percentunit", minmax=(0, 1), extra=_LEGEND,
            description="The sidecar's own sequential detector (per replica, averaged)."),
        Panel("Decisions", "timeseries",
              [Target(f"sum by (decision) (rate(ctxprec_samples_total{{{SVC}}}[$__rate_interval]))", "{{decision}}")],
              w=24, h=7, unit="reqps", extra=_LEGEND,
              defaults={"custom": {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30}},
              description="Every retrieval ends in exactly one decision."),
    ]
    return dashboard("ctxprec-overview", "ctxprec / Overview",
                     "RAG retrieval quality: context precision per service against its baseline.", panels)


def diagnostics() -> dict[str, Any]:
    panels = [
        Panel("Relevance rate by rank", "bargauge", [Target(
            f'sum by (rank) (increase(ctxprec_rank_judged_total{{{SVC}, relevant="true"}}[$__range]))'
            f" / sum by (rank) (increase(ctxprec_rank_judged_total{{{SVC}}}[$__range]))",
            "rank {{rank}}", instant=True)],
            w=12, h=10, unit="percentunit", minmax=(0, 1),
            description="Share of contexts judged relevant at each 1-based rank over the time range. "
                        "A healthy retriever has a rate that falls with the rank.",
            extra={"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
                   "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}),
        Panel("Relevance rate at ranks 1-3 over time", "timeseries", [Target(
            f'sum by (rank) (rate(ctxprec_rank_judged_total{{{SVC}, relevant="true", rank=~"1|2|3"}}[$__rate_interval]))'
            f' / sum by (rank) (rate(ctxprec_rank_judged_total{{{SVC}, rank=~"1|2|3"}}[$__rate_interval]))',
            "rank {{rank}}")], w=12, h=10, unit="percentunit", minmax=(0, 1), extra=_LEGEND),
        Panel("Precision@k (5m mean)", "timeseries",
              [Target(f"service_retriever:ctxprec_precision_at_k:mean5m{{{SVC_RET}}}", "{{service}}/{{retriever}}")],
              w=8, h=8, unit="percentunit", minmax=(0, 1), extra=_LEGEND,
              description="Fraction of retrieved contexts judged relevant (ignores order, unlike MAP)."),
        Panel("Hit rate (5m)", "timeseries",
              [Target(f"service_retriever:ctxprec_hit:ratio5m{{{SVC_RET}}}", "{{service}}/{{retriever}}")],
              w=8, h=8, unit="percentunit", minmax=(0, 1), extra=_LEGEND,
              description="Share of retrievals with at least one relevant context (exact for k < 10)."),
        Panel("Context precision quantiles", "timeseries", [
            Target(f"histogram_quantile(0.1, sum by (le, service) (rate(ctxprec_context_precision_bucket{{{SVC_RET}}}[$__rate_interval])))",
                   "{{service}} p10", exemplar=True),
            Target(f"histogram_quantile(0.5, sum by (le, service) (rate(ctxprec_context_precision_bucket{{{SVC_RET}}}[$__rate_interval])))",
                   "{{service}} p50"),
        ], w=8, h=8, unit="percentunit", minmax=(0, 1), extra=_LEGEND,
            description="Low quantiles of precision. Exemplars (when the sidecar attaches trace ids and "
                        "Prometheus stores exemplars) link the lowest-scoring traces."),
        Panel("Lowest-scoring service/retriever pairs (1h)", "table",
              [Target(f"bottomk(10, service_retriever:ctxprec_context_precision:mean1h{{{SVC_RET}}})",
                      instant=True, fmt="table")],
              w=12, h=8, unit="percentunit", extra={"showHeader": True, "cellHeight": "sm"}),
        Panel("Recommended top-k", "stat",
              [Target(f"max by (service, retriever) (ctxprec_recommended_k{{{SVC_RET}}})", "{{service}}/{{retriever}}",
                      instant=True)],
              w=12, h=6, unit="short",
              description="Smallest number of contexts per retrieval that keeps 95% of the contexts the judge "
                          "found relevant (from relevance by rank; empty until 30 relevant contexts were seen). "
                          "/diagnostics/top_k on the sidecar's metrics port has the whole curve.",
              extra={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                     "colorMode": "none", "graphMode": "none", "textMode": "value_and_name"},
              defaults={"decimals": 0}),
        Panel("Context tokens saved per request at the recommended k", "timeseries",
              [Target(f"max by (service, retriever) (ctxprec_recommended_k_saved_tokens{{{SVC_RET}}})",
                      "{{service}}/{{retriever}}")],
              w=12, h=6, unit="short", extra=_LEGEND,
              description="Tokens (characters / 4) of the contexts ranked after the recommended k, per "
                          "request: what cutting the retriever to k would stop sending to the LLM."),
        Panel("Score delay (retrieval end to score)", "timeseries", [
            Target("histogram_quantile(0.5, sum by (le) (rate(ctxprec_score_delay_seconds_bucket[$__rate_interval])))", "p50"),
            Target("histogram_quantile(0.95, sum by (le) (rate(ctxprec_score_delay_seconds_bucket[$__rate_interval])))", "p95"),
        ], w=12, h=8, unit="s", extra=_LEGEND),
    ]
    return dashboard("ctxprec-retrieval", "ctxprec / Retrieval diagnostics",
                     "Why precision moved: relevance by rank, precision@k, hit rate, low scorers.", panels)


def scorer_health() -> dict[str, Any]:
    panels = [
        Panel("Decisions by reason", "timeseries",
              [Target(f"sum by (decision) (rate(ctxprec_samples_total{{{SVC}}}[$__rate_interval]))", "{{decision}}")],
              w=12, h=8, unit="reqps", extra=_LEGEND,
              defaults={"custom": {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30}}),
        Panel("Spans received", "timeseries",
              [Target("sum by (receiver) (rate(ctxprec_spans_received_total[$__rate_interval]))", "{{receiver}}")],
              w=12, h=8, unit="reqps", extra=_LEGEND),
        Panel("What relevance was judged against", "timeseries",
              [Target(f"sum by (reference_kind) (rate(ctxprec_reference_kind_total{{{SVC}}}[$__rate_interval]))"
                      f" / ignoring(reference_kind) group_left sum(rate(ctxprec_reference_kind_total{{{SVC}}}[$__rate_interval]))",
                      "{{reference_kind}}")],
              w=24, h=8, unit="percentunit", minmax=(0, 1), extra=_LEGEND,
              defaults={"custom": {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30}},
              description="Share of scores judged against the app's answer (output), a reference answer "
                          "(expected_output) or the question alone (query). A sudden rise of query means "
                          "the answers stopped being found in the traces, most often because the app's "
                          "instrumentation changed: scores then judge contexts against the question and "
                          "are not comparable with the ones before."),
        Panel("Judge requests by outcome", "timeseries",
              [Target("sum by (model, outcome) (rate(ctxprec_judge_requests_total[$__rate_interval]))",
                      "{{model}} {{outcome}}")], w=8, h=8, unit="reqps", extra=_LEGEND),
        Panel("Judge latency", "timeseries", [
            Target(f"histogram_quantile({q}, sum by (le, model) (rate(ctxprec_judge_latency_seconds_bucket[$__rate_interval])))",
                   f"{{{{model}}}} p{int(q * 100)}") for q in (0.5, 0.9, 0.99)
        ], w=8, h=8, unit="s", extra=_LEGEND),
        Panel("Judge tokens", "timeseries",
              [Target("sum by (model, kind) (rate(ctxprec_judge_tokens_total[$__rate_interval]))", "{{model}} {{kind}}")],
              w=8, h=8, unit="short", extra=_LEGEND, description="Tokens per second."),
        Panel("Judge cost (USD per hour)", "timeseries",
              [Target("sum by (model) (rate(ctxprec_judge_cost_usd_total[$__rate_interval])) * 3600", "{{model}}")],
              w=8, h=8, unit="currencyUSD", extra=_LEGEND,
              description="From litellm's cost map; 0 for models it does not know (local judge, stubs)."),
        Panel("Judge agreement with people (Cohen's kappa)", "timeseries", [
            Target('max by (judge) (ctxprec_judge_kappa{against="human"})', "{{judge}} kappa"),
            Target('max by (judge) (ctxprec_judge_kappa_lower{against="human"})', "{{judge}} 95% low"),
            Target('max by (judge) (ctxprec_judge_kappa_upper{against="human"})', "{{judge}} 95% high"),
            Target("max(ctxprec_judge_kappa_alert_threshold)", "alert threshold"),
        ], w=12, h=8, unit="short", minmax=(-1, 1), extra=_LEGEND,
            description="Per judge fingerprint (ctxprec_judge_info says which model and prompt version): kappa "
                        "between the judge's verdicts and people's labels (POST /labels, --labels-file), with "
                        "its 95% interval. 1 is perfect agreement, 0 no better than chance. The alert "
                        "CtxprecJudgeDisagrees fires when the high end is under the threshold with at least 50 "
                        "labelled contexts (docs/JUDGES.md, \"How far to trust the judge\")."),
        Panel("Labelled contexts and agreement", "timeseries", [
            Target("max by (judge, against) (ctxprec_judge_labels_total)", "{{judge}} vs {{against}}: labelled"),
            Target("max by (judge, against) (ctxprec_judge_agreement_ratio) * 100",
                   "{{judge}} vs {{against}}: agreement %"),
        ], w=12, h=8, unit="short", extra=_LEGEND,
            description="Contexts compared with people's labels (against=human) or, for a shadow judge, with "
                        "the live judge (against=live), and the share on which they agreed. Labels that could "
                        "not be compared are in ctxprec_judge_labels_unmatched_total."),
        Panel("Queue depth and traces buffered", "timeseries", [
            Target("sum(ctxprec_queue_depth)", "queue depth"),
            Target("sum(ctxprec_traces_buffered)", "traces buffered"),
        ], w=8, h=8, unit="short", extra=_LEGEND),
        Panel("Kafka consumer lag", "timeseries",
              [Target("sum by (topic, partition) (ctxprec_kafka_consumer_lag)", "{{topic}}/{{partition}}")],
              w=8, h=8, unit="short", extra=_LEGEND,
              description="Messages behind the head of each partition (Kafka input only)."),
        Panel("Rejected input and evictions", "timeseries", [
            Target("sum by (receiver, reason) (rate(ctxprec_receiver_errors_total[$__rate_interval]))", "{{receiver}} {{reason}}"),
            Target("sum by (reason) (rate(ctxprec_trace_evictions_total[$__rate_interval]))", "evicted: {{reason}}"),
            Target("sum by (listener, reason) (rate(ctxprec_listener_connections_refused_total"
                   "{reason!=\"idle\"}[$__rate_interval]))", "closed: {{listener}} {{reason}}"),
        ], w=12, h=8, unit="reqps", extra=_LEGEND,
            description="Bad OTLP/Kafka input, traces dropped from the assembly buffer, and connections a "
                        "listener closed to protect itself (slow, surplus, oversized, out of file descriptors; "
                        "idle closes are ordinary and left out)."),
        Panel("Sample rate", "timeseries",
              [Target(f"max by (service) (ctxprec_sample_rate{{{SVC}}})", "{{service}}")],
              w=12, h=8, unit="percentunit", minmax=(0, 1), extra=_LEGEND,
              description="Share of traces scored per service. With adaptive sampling on, a service's rate rises "
                          "while its drift detector suspects a drift, and returns to base once the drift is "
                          "confirmed or gone (docs/STATISTICS.md)."),
        Panel("LLM traffic but no scored retrievals", "table",
              [Target(f"(sum by (service) (increase(ctxprec_llm_spans_without_retrieval_total{{{SVC}}}[$__range])) > 0)"
                      f" unless on (service) (sum by (service) (increase(ctxprec_samples_total"
                      f"{{{SVC}, decision=\"evaluated\"}}[$__range])) > 0)", instant=True, fmt="table")],
              w=12, h=8, extra={"showHeader": True, "cellHeight": "sm"},
              description="Services whose sampled traces call a model without any retrieval ctxprec can read, "
                          "and that got no score in the time range: their retrievals go unmeasured. "
                          "/diagnostics/conventions on the metrics port lists, per service, what each convention "
                          "matched and the tools seen and not taken (docs/FORMATS.md)."),
        Panel("Tool calls not read as retrievals", "table",
              [Target(f"sum by (service, tool) (increase(ctxprec_tool_spans_not_taken_total{{{SVC}}}[$__range])) > 0",
                      instant=True, fmt="table")],
              w=12, h=8, extra={"showHeader": True, "cellHeight": "sm"},
              description="Agent tool calls whose result was not a list of documents (or that the "
                          "conventions.tools settings leave out). A retrieval tool here is unmeasured: add it "
                          "to conventions.tools.include. The log names each tool once."),
        Panel("Replicas up", "stat", [Target("count(ctxprec_build_info) by (version)", "{{version}}", instant=True)],
              w=12, h=8, extra={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                                "colorMode": "none", "graphMode": "none", "textMode": "value_and_name"}),
    ]
    return dashboard("ctxprec-scorer-health", "ctxprec / Scorer health",
                     "Is the scorer keeping up: decisions, judge latency, tokens, cost, queues, Kafka lag.",
                     panels, with_retriever=False)


DASHBOARDS = {"ctxprec-overview.json": overview, "ctxprec-retrieval.json": diagnostics,
              "ctxprec-scorer-health.json": scorer_health}


def render(name: str) -> str:
    return json.dumps(DASHBOARDS[name](), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a JSON file differs from the code")
    args = parser.parse_args(argv)
    stale = []
    for name in DASHBOARDS:
        path = HERE / name
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)}; run python -m dashboards.generate", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
