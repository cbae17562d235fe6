"""The report's "How far to trust the judge" section: people's labels (`ctxprec report --labels`)
against the verdicts in the score records, per judge (model and prompt version)."""
from __future__ import annotations

from html import escape
from typing import Any

import ctxprec.scorer.report.html as pieces
from ctxprec.scorer.labels import LabelledAgreement

# Under this many labelled contexts the interval is too wide to say much (docs/JUDGES.md).
FEW_LABELS = 50


def judge_of_record(record: dict[str, Any]) -> str:
    """The judge a record's verdicts came from, as its record names it: model and prompt version."""
    judge = record.get("judge") if isinstance(record.get("judge"), dict) else {}
    model = str(judge.get("model") or "unknown")
    version = judge.get("prompt_version")
    return f"{model} (prompt {version})" if version else model


def judge_agreement_section(agreement: LabelledAgreement, source: str) -> str:
    rows = []
    for judge, c in sorted(agreement.per_judge.items()):
        interval = c.kappa_interval()
        shown = f"{interval[0]:.2f} to {interval[1]:.2f}" if interval else "&ndash;"
        rows.append([escape(judge), str(c.total), pieces.num(c.agreement), pieces.num(c.kappa), shown,
                     pieces.num(c.precision), pieces.num(c.recall),
                     f"{c.both_relevant} / {c.judge_only} / {c.reference_only} / {c.both_irrelevant}"])
    table = pieces.table([("judge", False), ("labelled contexts", True), ("agreement", True), ("kappa", True),
                          ("kappa 95% interval", False), ("precision", True), ("recall", True),
                          ("yes/yes / yes/no / no/yes / no/no", False)], rows) if rows else (
        '<p class="note">No label matched a scored retrieval (labels name them by trace_id and span_id).</p>')
    notes = []
    if any(c.total < FEW_LABELS for c in agreement.per_judge.values()):
        notes.append(f"Fewer than {FEW_LABELS} labelled contexts give a kappa interval too wide to act on.")
    if agreement.not_found:
        notes.append(f"{agreement.not_found} labelled contexts are of retrievals these records do not hold.")
    if agreement.refused_count:
        first = agreement.refused[0]
        notes.append(f"{agreement.refused_count} label lines were refused (first: line {first[0]}: "
                     f"{escape(first[1])}).")
    intro = (f'<p class="note">People\'s labels from <code>{escape(source)}</code> against the judge\'s verdicts, '
             "per context. Kappa is agreement beyond what chance gives (1 perfect, 0 no better than chance); "
             "precision and recall are those of the judge's &ldquo;relevant&rdquo; against the people's. "
             "Confusion: judge/people.</p>")
    extra = "".join(f'<p class="note">{n}</p>' for n in notes)
    return pieces.section("judge-agreement", "How far to trust the judge", intro + table + extra)
