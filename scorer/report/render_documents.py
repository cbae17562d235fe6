"""HTML for the report's document and top-k sections: "The right top-k", "Top noisy documents" and
"Documents never judged relevant". Built from ReportData.top_k and ReportData.documents, with the
report's SVG charts."""
from __future__ import annotations

from html import escape

from ctxprec.scorer.report.documents import NEVER_RELEVANT_MIN_RETRIEVED, DocumentFigures, DocumentRow, TopKFigures
from ctxprec.scorer.report.html import num, pct, section, table
from ctxprec.scorer.report.svg import Point, line_chart
from ctxprec.scorer.top_k import DEFAULT_MIN_RELEVANT, RULE

NO_DOCUMENTS = (
    '<p class="notice">These score records name no documents: their verdicts carry no '
    "<code>document</code> key (they were written by an older ctxprec). Score the events again with "
    "<code>ctxprec score</code> to see documents here.</p>"
)


def top_k_section(figures: TopKFigures) -> str:
    heading = "The right top-k"
    advice = figures.overall
    if advice is None:
        return section("top-k", heading, '<p class="note">No verdicts to count.</p>')
    points = [Point(x=p.k, y=p.kept_share, tooltip=f"top-{p.k}: keeps {p.kept_share:.1%} of the relevant contexts, "
                                                  f"{p.contexts_per_request:.2f} contexts per request")
              for p in advice.curve]
    chart = line_chart("Share of relevant contexts kept vs k", points,
                       x_labels=(f"k = {advice.curve[0].k}", f"k = {advice.curve[-1].k}"),
                       x_label="k: contexts kept from the top of each retrieval")
    if advice.recommended_k is None:
        hint = (f'<p class="note" id="top-k-recommendation">Too few relevant contexts ({advice.relevant:g}) to '
                "recommend a top-k.</p>")
    else:
        at_k = advice.curve[advice.recommended_k - 1]
        hint = (
            f'<p class="hint" id="top-k-recommendation" data-k="{advice.recommended_k}">'
            f"Recommended top-k: <strong>{advice.recommended_k}</strong>. It keeps {at_k.kept_share:.1%} of the "
            f"relevant contexts and sends {advice.saved_contexts_per_request:.2f} fewer contexts per request "
            f"({at_k.contexts_per_request:.2f} instead of {advice.curve[-1].contexts_per_request:.2f}). Score records "
            "carry no context sizes, so the saving is in contexts here; the sidecar's "
            "<code>ctxprec_recommended_k_saved_tokens</code> gives it in tokens.</p>"
        )
    rows = []
    for row in figures.pairs:
        a = row.advice
        kept = a.curve[a.recommended_k - 1].kept_share if a.recommended_k else None
        rows.append([escape(row.service), escape(row.retriever), f"{a.requests:g}", str(a.max_rank),
                     str(a.recommended_k) if a.recommended_k else "&ndash;", pct(kept),
                     num(a.saved_contexts_per_request if a.recommended_k else None, 2)])
    rendered = table([("service", False), ("retriever", False), ("retrievals", True), ("deepest rank", True),
                    ("recommended k", True), ("relevant kept", True), ("contexts saved per request", True)], rows)
    return section(
        "top-k", heading,
        f'<p class="note">The recommended top-k is {RULE} (once {DEFAULT_MIN_RELEVANT} of them were seen): '
        "if the retriever returned only its first k contexts, how many of the contexts the judge found "
        f"relevant would still reach the LLM.</p>{chart}{hint}{rendered}",
    )


def noisy_documents_section(figures: DocumentFigures) -> str:
    heading = "Top noisy documents"
    if not figures.named_verdicts:
        return section("noisy-documents", heading, NO_DOCUMENTS)
    if not figures.noisy:
        return section("noisy-documents", heading, '<p class="note">No document was judged irrelevant.</p>')
    rows = [[_document(r), str(r.irrelevant), str(r.retrieved), str(r.relevant),
             pct(r.irrelevant_rate), num(r.mean_rank, 1)] for r in figures.noisy]
    rendered = table([("document", False), ("judged irrelevant", True), ("retrieved", True), ("relevant", True),
                    ("irrelevant rate", True), ("mean rank", True)], rows)
    return section(
        "noisy-documents", heading,
        '<p class="note">The documents most often retrieved and judged irrelevant: candidates for removal, '
        "re-chunking or better metadata. Documents are named by their id, or by <code>sha256:</code> and a "
        f"hash of their text, with its first words, when they have none.{_left_out(figures)}</p>{rendered}",
    )


def never_relevant_section(figures: DocumentFigures) -> str:
    heading = "Documents never judged relevant"
    if not figures.named_verdicts:
        return section("never-relevant", heading, NO_DOCUMENTS)
    if not figures.never_relevant:
        return section("never-relevant", heading,
                        f'<p class="note">Every document retrieved at least {NEVER_RELEVANT_MIN_RETRIEVED} times was '
                        "judged relevant at least once.</p>")
    shown = len(figures.never_relevant)
    more = f" (the {shown} most retrieved are listed)" if figures.never_relevant_count > shown else ""
    rows = [[_document(r), str(r.retrieved), num(r.mean_rank, 1)] for r in figures.never_relevant]
    rendered = table([("document", False), ("retrieved", True), ("mean rank", True)], rows)
    return section(
        "never-relevant", heading,
        f'<p class="note" data-count="{figures.never_relevant_count}">{figures.never_relevant_count} of '
        f"{figures.distinct} documents were retrieved at least {NEVER_RELEVANT_MIN_RETRIEVED} times and never judged "
        f"relevant{more}.{_left_out(figures)}</p>{rendered}",
    )


def _document(row: DocumentRow) -> str:
    """The document's name, and beside a hash the first words of its text (from its verdicts)."""
    name = f"<code>{escape(row.document)}</code>"
    if row.preview:
        name += f'<br><span class="preview">{escape(row.preview)}</span>'
    return name


def _left_out(figures: DocumentFigures) -> str:
    if not figures.unnamed_verdicts:
        return ""
    return (f" {figures.unnamed_verdicts} verdicts of older records name no document and are left out of this "
            "table.")
