"""docs/METRICS.md, generated from the metric definitions, so the list cannot drift from the code.

    python -m ctxprec.collector.metrics.reference            # rewrite docs/METRICS.md
    python -m ctxprec.collector.metrics.reference --check    # exit 1 when it is out of date
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ctxprec.collector.generated_docs import write_or_check
from ctxprec.collector.metrics.config import MetricsConfig
from ctxprec.collector.metrics.registry import (
    RECEIVER_ERROR_REASONS,
    RESOLVER_ID_OUTCOMES,
    RESOLVER_LOOKUP_OUTCOMES,
    RESOLVER_REASONS,
    Metrics,
    rank_label,
)
from ctxprec.collector.model import Decision
from prometheus_client.metrics import MetricWrapperBase

PATH = Path(__file__).resolve().parents[2] / "docs" / "METRICS.md"

INTRO_TEMPLATE = """# Metrics of `ctxprec serve`

Generated from the metric definitions by `python -m ctxprec.collector.metrics.reference`; a test
fails when this page and the code disagree.

All metrics are on the metrics address (`metrics.listen`, `--metrics`, `{listen}` unless
set), path `/metrics`, in the Prometheus text format (or OpenMetrics, with exemplars, when the
scraper asks for it). The same port answers `/healthz` (the process runs) and `/readyz` (200
when every readiness check passes: receivers listening, judge reachable; the body names the
failing ones). Counters are exposed with the `_total` suffix, histograms as `_bucket`, `_sum`
and `_count`.

`service` is the trace's `service.name` (or the event's `service`) and `retriever` the retrieval
span's name (or the event's `retriever`); each keeps its first `metrics.max_services` /
`metrics.max_retrievers` distinct values and counts the rest as `other`. The two caps multiply
(50 services x 50 retrievers x a histogram's 13 series), so each metric family also has a budget
of `metrics.max_series_per_metric` series (`--max-series-per-metric`, default 2,000, a histogram's
buckets, sum and count counted): a label set that would take the family past it is counted with
its `service` and `retriever` as `other` (its other labels kept), and in
`ctxprec_metric_series_folded_total{{metric}}`. A misbehaving client cannot blow up the series count:
50 x 50 names make about 12,800 series (a 1.25 MB scrape), where they made 80,000 (7.6 MB). Series
whose label values are known at start (receiver errors, judge outcomes) exist at 0 from the start.
"""


@dataclass(frozen=True)
class MetricDoc:
    name: str  # as scraped (counters with _total)
    kind: str
    labels: tuple[str, ...]
    help: str


def metric_docs(metrics: Metrics) -> list[MetricDoc]:
    docs: list[MetricDoc] = []
    for value in vars(metrics).values():
        if not isinstance(value, MetricWrapperBase):
            continue
        # The wrapper keeps its name, type and label names only as attributes; there is no
        # public accessor for label names of a metric that has no series yet.
        kind = value._type  # noqa: SLF001
        name = value._name + ("_total" if kind == "counter" else "")  # noqa: SLF001
        docs.append(MetricDoc(name, kind, tuple(value._labelnames), value._documentation))  # noqa: SLF001
    return docs


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(f"`{v}`" for v in values)


def _label_values() -> str:
    rows = [
        ("`decision` (`ctxprec_samples_total`)", ", ".join(f"`{d.value}`" for d in Decision)),
        ("`rank` (`ctxprec_rank_judged_total`)", f"`1` ... `20`, then `{rank_label(21)}`"),
        ("`relevant` (`ctxprec_rank_judged_total`)", "`true`, `false`"),
        ("`reference_kind`", "`expected_output`, `output`, `query`"),
        ("`tool` (`ctxprec_tool_spans_not_taken_total`)",
         "the tool's name (`gen_ai.tool.name`, `tool.name`, else the span name): the first 50 of a service, "
         "then `other`; each is logged once with the setting that would take it, and "
         "`/diagnostics/conventions` says why it was not taken"),
    ]
    for receiver, reasons in RECEIVER_ERROR_REASONS.items():
        rows.append((f"`reason` of receiver `{receiver}` (`ctxprec_receiver_errors_total`)",
                     ", ".join(f"`{r}`" for r in reasons)))
    from ctxprec.scorer.judge.chat import REQUEST_OUTCOMES
    from ctxprec.scorer.judge.local import FALLBACK_REASONS, LOCAL_OUTCOMES

    rows.append(("`outcome` (`ctxprec_judge_requests_total`)",
                 ", ".join(f"`{o}`" for o in REQUEST_OUTCOMES) + "; for the `local` judge "
                 + ", ".join(f"`{o}`" for o in LOCAL_OUTCOMES)))
    rows.append(("`reason` (`ctxprec_local_judge_fallback_total`)", ", ".join(f"`{r}`" for r in FALLBACK_REASONS)))
    rows += [("`source` (`ctxprec_resolver_*`)", "the `name` of each `resolver.sources` entry"),
             ("`outcome` (`ctxprec_resolver_lookups_total`)", _listed(RESOLVER_LOOKUP_OUTCOMES)),
             ("`outcome` (`ctxprec_resolver_ids_total`)", _listed(RESOLVER_ID_OUTCOMES)),
             ("`reason` (`ctxprec_resolver_unresolved_total`)", _listed(RESOLVER_REASONS))]
    from ctxprec.collector.judging.agreement import AGAINST, ROLES
    from ctxprec.scorer.labels import UNMATCHED_REASONS

    rows += [("`judge` (`ctxprec_judge_labels_total`, `ctxprec_judge_agreement_ratio`, `ctxprec_judge_kappa*`, "
              "`ctxprec_judge_info`)",
              "the judge's fingerprint, `cp-` and 16 hex digits (the score records' identifier); "
              "`ctxprec_judge_info` names its model, prompt version and role"),
             ("`against` (the same)", _listed(AGAINST) + " (people's labels; the live judge, for a shadow judge)"),
             ("`role` (`ctxprec_judge_info`)", _listed(ROLES)),
             ("`reason` (`ctxprec_judge_labels_unmatched_total`)", _listed(UNMATCHED_REASONS))]
    lines = ["## Label values", "", "| label | values |", "|---|---|"]
    lines += [f"| {label} | {values} |" for label, values in rows]
    return "\n".join(lines) + "\n"


def render() -> str:
    listen = MetricsConfig().listen
    intro = INTRO_TEMPLATE.format(listen="off" if listen is None else f"{listen[0]}:{listen[1]}")
    lines = [intro, "## Metrics", "", "| metric | type | labels | meaning |", "|---|---|---|---|"]
    for doc in metric_docs(Metrics()):
        labels = ", ".join(f"`{label}`" for label in doc.labels) or "-"
        lines.append(f"| `{doc.name}` | {doc.kind} | {labels} | {doc.help} |")
    return "\n".join(lines) + "\n\n" + _label_values()


def main(argv: list[str] | None = None) -> int:
    return write_or_check(PATH, render, "ctxprec.collector.metrics.reference", __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
