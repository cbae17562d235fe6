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
from ctxprec.scorer.report.stats import HISTOGRAM_BINS, TOP_K_HINT_RATE, ReportData
from ctxprec.scorer.report.svg import Bar, Point, bar_chart, line_chart

REASON_CHARS = 600  # reasons are cut in the table of lowest scores; the record keeps the rest


def render_report(source: str, loaded: LoadedRecords, data: ReportData) -> str:
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
            _distribution(data),
            _over_time(data),
            _rank_relevance(data),
            top_k_section(data.top_k),
            _services(data),
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
    if data.top_k_hint is not None:
        hint = (
            f'<p class="hint" id="top-k-hint">Contexts ranked after {data.top_k_hint} are judged relevant less than '
            f"{TOP_K_HINT_RATE:.0%} of the time: a top-k of {data.top_k_hint} would keep almost every relevant "
            "context while sending fewer tokens to the LLM.</p>"
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
                _ids(record),
                str(record.get("k", "")),
                str(record.get("first_relevant_rank") or "none"),
                escape(_cut(str(record.get("reason") or ""))),
            ]
        )
    table = pieces.table(
        [("score", True), ("service", False), ("trace / span", False), ("k", True), ("first relevant", True), ("reason", False)],
        rows,
    )
    return pieces.section("lowest", "Lowest-scoring samples", table)


def _failures(data: ReportData) -> str:
    if not data.failures:
        return pieces.section("failures", "Failures", '<p class="note">No failures.</p>')
    rows = [
        [escape(g.kind), str(g.count), "<br>".join(escape(_cut(m)) for m in g.examples)] for g in data.failures
    ]
    table = pieces.table([("error type", False), ("count", True), ("examples", False)], rows)
    return pieces.section("failures", "Failures", table)


def _ids(record: dict[str, Any]) -> str:
    trace, span = record.get("trace_id") or "", record.get("span_id") or ""
    if not trace and not span:
        return "&ndash;"
    return f"<code>{escape(str(trace))}</code><br><code>{escape(str(span))}</code>"


def _cut(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "\u2026"


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
