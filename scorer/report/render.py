"""HTML for the report: one self-contained page (inline CSS and SVG) built from ReportData."""
from __future__ import annotations

from datetime import datetime, timezone
from html import escape
from importlib import resources
from string import Template
from typing import Any

import ctxprec.scorer.report.html as pieces
from ctxprec.scorer.report.load import LoadedRecords
from ctxprec.scorer.report.render_documents import (
    never_relevant_section,
    noisy_documents_section,
    top_k_section,
)
from ctxprec.scorer.report.stats import HISTOGRAM_BINS, ReportData
from ctxprec.scorer.report.svg import Bar, Point, bar_chart, line_chart
from ctxprec.scorer.top_k import RULE

REASON_CHARS = 600  # reasons are cut in the table of lowest scores; the record keeps the rest
QUESTION_CHARS = 200  # questions are cut in the tables; the record keeps up to --record-text-chars


def render_report(source: str, loaded: LoadedRecords, data: ReportData, judge_section: str = "") -> str:
    template = Template(resources.files("ctxprec.scorer.report").joinpath("template.html").read_text(encoding="utf-8"))
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = [_problems(loaded)]
    if not loaded.records:
        sections.append(
            '<section id="empty"><p class="notice">No score records found in '
            f"<code>{escape(source)}</code> ({loaded.lines} lines read). "
            "Make some with <code>ctxprec score EVENTS.jsonl -o SCORES.jsonl</code>.</p></section>"
        )
    else:
        sections += [
            _summary(data),
            judge_section,
            _distribution(data),
            _over_time(data),
            _rank_relevance(data),
            top_k_section(data.top_k),
            _services(data),
            _drifts(data),
            noisy_documents_section(data.documents),
            never_relevant_section(data.documents),
            _lowest(data),
            _failures(data),
        ]
    return template.substitute(
        title=escape(source),
        subtitle=f"{escape(source)} &middot; {data.total} records &middot; generated {generated}",
        body="\n".join(s for s in sections if s),
    )


def _problems(loaded: LoadedRecords) -> str:
    if not loaded.problem_count:
        return ""
    shown = "".join(f"<li>{escape(p)}</li>" for p in loaded.problems)
    more = loaded.problem_count - len(loaded.problems)
    tail = f"<li>&hellip; and {more} more</li>" if more else ""
    return pieces.section(
        "problems",
        "Lines skipped",
        f'<p class="notice">{loaded.problem_count} line(s) of the input are not score records and were left out '
        f"of everything below.</p><ul>{shown}{tail}</ul>",
    )


def _summary(data: ReportData) -> str:
    scales = ", ".join(f"{s:g}" for s in data.scales) or "&ndash;"
    cards = [
        ("records", str(data.total)),
        ("scored", str(data.scored)),
        ("failed", str(data.failed)),
        ("mean score (0..1)", pieces.num(data.mean)),
        ("scale", scales),
    ]
    inner = '<div class="cards">' + "".join(
        f'<div class="card" data-key="{escape(k)}"><div class="v">{v}</div><div class="k">{escape(k)}</div></div>' for k, v in cards
    ) + "</div>"
    return pieces.section("summary", "Summary", inner)


def _distribution(data: ReportData) -> str:
    if not data.scored:
        return pieces.section("distribution", "Score distribution", '<p class="note">No scored samples.</p>')
    width = 1 / HISTOGRAM_BINS
    bars = []
    for i, count in enumerate(data.histogram):
        low, high = i * width, (i + 1) * width
        closing = "]" if i == HISTOGRAM_BINS - 1 else ")"
        bars.append(Bar(label=f"{low:.1f}", value=count, tooltip=f"[{low:.1f}, {high:.1f}{closing}: {count} samples"))
    chart = bar_chart("Score distribution", bars, x_label="score (bin start; last bin includes 1.0)")
    return pieces.section(
        "distribution",
        "Score distribution",
        f'<p class="note">How many samples fell in each tenth of the 0..1 score range.</p>{chart}',
    )


def _over_time(data: ReportData) -> str:
    if not data.time_series:
        return pieces.section("over-time", "Score over time", '<p class="note">No record carries a readable time.</p>')
    points = [
        Point(x=p.start, y=p.mean, tooltip=f"{_when(p.start)}: mean {p.mean:.3f} over {p.count} samples")
        for p in data.time_series
    ]
    first, last = data.time_series[0].start, data.time_series[-1].start
    chart = line_chart(
        "Mean score over time",
        points,
        x_labels=(_when(first), _when(last)),
        x_label=f"time ({data.time_source}), buckets of {_bucket(data.time_bucket_s)}",
    )
    return pieces.section(
        "over-time",
        "Score over time",
        f'<p class="note">Mean score per {_bucket(data.time_bucket_s)}, by {escape(data.time_source)}.</p>{chart}',
    )


def _rank_relevance(data: ReportData) -> str:
    if not data.ranks:
        return pieces.section("rank-relevance", "Relevance rate by rank", '<p class="note">No verdicts to count.</p>')
    bars = [
        Bar(label=str(r.rank), value=round(r.rate, 4), tooltip=f"rank {r.rank}: {r.relevant} of {r.judged} relevant ({r.rate:.1%})")
        for r in data.ranks
    ]
    chart = bar_chart("Relevance rate by rank", bars, x_label="rank of the context (1 = first retrieved)", y_max=1.0, percent=True)
    hint = ""
    advice = data.top_k.overall
    if advice is not None and advice.recommended_k is not None and advice.recommended_k < advice.max_rank:
        # The one top-k rule (scorer/top_k.py), with the figure "The right top-k" gives.
        k = advice.recommended_k
        hint = (
            f'<p class="hint" id="top-k-hint" data-k="{k}">Ranks 1 to {k} hold '
            f"{advice.curve[k - 1].kept_share:.1%} of the relevant contexts: the recommended top-k is {k} "
            f"({RULE}; see The right top-k below).</p>"
        )
    rows = [[str(r.rank), str(r.judged), str(r.relevant), pieces.pct(r.rate)] for r in data.ranks]
    table = pieces.table([("rank", True), ("judged", True), ("relevant", True), ("relevance rate", True)], rows)
    return pieces.section(
        "rank-relevance",
        "Relevance rate by rank",
        '<p class="note">The fraction of contexts at each rank that the judge found relevant. '
        "Where it falls to near zero, the retriever returns more than the answer uses.</p>"
        f"{chart}{hint}{table}",
    )


def _services(data: ReportData) -> str:
    rows = [
        [escape(s.service), str(s.count), pieces.num(s.mean), pieces.num(s.p10), pieces.pct(s.hit_rate), str(s.failures)]
        for s in data.services
    ]
    table = pieces.table(
        [("service", False), ("count", True), ("mean", True), ("p10", True), ("hit rate", True), ("failures", True)], rows
    )
    return pieces.section(
        "services",
        "By service",
        '<p class="note">Scores on 0..1. p10: nine in ten samples score at least this. '
        "Hit rate: samples with at least one relevant context.</p>" + table,
    )


def _lowest(data: ReportData) -> str:
    if not data.lowest:
        return pieces.section("lowest", "Lowest-scoring samples", '<p class="note">No scored samples.</p>')
    rows = []
    for record in data.lowest:
        rows.append(
            [
                pieces.num(record.get("score"), 2),
                escape(str(record.get("service") or "")),
                _question(record),
                _where(record),
                str(record.get("k", "")),
                str(record.get("first_relevant_rank") or "none"),
                escape(_cut(str(record.get("reason") or ""))),
            ]
        )
    table = pieces.table(
        [("score", True), ("service", False), ("question", False), ("where", False), ("k", True),
         ("first relevant", True), ("reason", False)],
        rows,
    )
    return pieces.section(
        "lowest", "Lowest-scoring samples",
        '<p class="note">Where: the line of the input file and the event\'s own id (<code>ctxprec score</code>), '
        "or the trace and span (the sidecar).</p>" + table)


def _drifts(data: ReportData) -> str:
    """The drifts the sidecar's detector finds in these scores, in the words it logs them in."""
    heading = "Drift"
    if not data.drifts:
        return pieces.section("drift", heading, '<p class="note">No scored samples.</p>')
    rows = []
    quiet = []
    for service in data.drifts:
        if not service.rows:
            learning = service.scores < service.warmup
            quiet.append(f"{escape(service.service)} ({service.scores} scores"
                         + (f", fewer than the {service.warmup} the detector learns its baseline from)" if learning
                            else ")"))
            continue
        for row in service.rows:
            end = ("still alarmed at the last record" if row.ended is None
                   else f"{escape(row.ended_at or '')}: {escape(row.ended.outcome())}")
            rows.append([escape(service.service), escape(row.started), f"{row.drift.before:.2f}",
                         f"{row.drift.after:.2f}", f"{row.drift.direction} {abs(row.drift.change):.2f}", end])
    note = ('<p class="note">The sidecar\'s drift detector, run over each service\'s scores in the order they '
            "happened: the level before the drift, the mean since it began, and the drop between them, as "
            "<code>ctxprec serve</code> logs them and the alert says them.</p>")
    none = (f'<p class="note" id="no-drift">No drift in {", ".join(quiet)}.</p>' if quiet else "")
    table = pieces.table([("service", False), ("alarm rose at", False), ("before", True), ("after", True),
                          ("change", True), ("ended", False)], rows) if rows else ""
    return pieces.section("drift", heading, note + table + none)


def _failures(data: ReportData) -> str:
    if not data.failures:
        return pieces.section("failures", "Failures", '<p class="note">No failures.</p>')
    rows = [
        [escape(g.kind), str(g.count), "<br>".join(escape(_cut(m)) for m in g.examples)] for g in data.failures
    ]
    table = pieces.table([("error type", False), ("count", True), ("examples", False)], rows)
    return pieces.section("failures", "Failures", table)


def _question(record: dict[str, Any]) -> str:
    query = record.get("query")
    return escape(_cut(query, QUESTION_CHARS)) if isinstance(query, str) and query else "&ndash;"


def _where(record: dict[str, Any]) -> str:
    """The line and event id of a batch record, the trace and span of the sidecar's."""
    parts = []
    if isinstance(record.get("line"), int):
        parts.append(f"line {record['line']}")
    if record.get("event_id") is not None:
        parts.append(f"id <code>{escape(str(record['event_id']))}</code>")
    trace, span = record.get("trace_id") or "", record.get("span_id") or ""
    if trace or span:
        parts.append(f"<code>{escape(str(trace))}</code> / <code>{escape(str(span))}</code>")
    return "<br>".join(parts) or "&ndash;"


def _cut(text: str, chars: int = REASON_CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "\u2026"


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _bucket(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} day(s)"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} hour(s)"
    if seconds % 60 == 0:
        return f"{seconds // 60} minute(s)"
    return f"{seconds} second(s)"
