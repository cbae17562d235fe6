"""The template reason, built from the verdicts with no extra judge call, in the usual form:
"The score is 0.83 because ...". It says which contexts (1-based ranks) were relevant or not,
with the judge's own per-item reasons, how their positions shaped MAP, and whether contexts
were truncated. Long samples are summarised: rank lists are compressed and only the first few
per-item reasons are quoted."""
from __future__ import annotations

from typing import Sequence

from ctxprec.scorer.precision import PrecisionSummary
from ctxprec.scorer.result import ReferenceKind, Verdict

QUOTED_REASONS = 3  # per side (relevant / not relevant)
REASON_CHARS = 170
MAX_RANK_PARTS = 8  # longer rank lists are cut, with the total

_TARGET = {
    "expected_output": "the expected output",
    "output": "the generated output",
    "query": "the query",
}


def format_score(score: float) -> str:
    return f"{score:g}"


def rank_list(ranks: Sequence[int]) -> str:
    """[1, 2, 3, 5, 7, 8] -> "1-3, 5, 7-8"."""
    parts: list[str] = []
    start = prev = None
    for rank in ranks:
        if start is None:
            start = prev = rank
        elif rank == prev + 1:
            prev = rank
        else:
            parts.append(_span(start, prev))
            start = prev = rank
    if start is not None:
        parts.append(_span(start, prev))
    if len(parts) > MAX_RANK_PARTS:
        return ", ".join(parts[:MAX_RANK_PARTS]) + f", ... ({len(ranks)} in all)"
    return ", ".join(parts)


def _span(start: int, end: int) -> str:
    return str(start) if start == end else f"{start}-{end}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _was(n: int) -> str:
    """The verb agrees with the count it follows: "1 of 3 ... was", "2 of 3 ... were", "0 ... were"."""
    return "was" if n == 1 else "were"


def _ranks(label: str, ranks: Sequence[int]) -> str:
    return f"{label} {rank_list(ranks)}" if len(ranks) > 1 else f"{label.rstrip('s')} {ranks[0]}"


def _quote(verdicts: Sequence[Verdict]) -> str:
    shown = []
    for v in verdicts[:QUOTED_REASONS]:
        text = " ".join(v.reason.split()).rstrip(".") or "no reason given"
        if len(text) > REASON_CHARS:
            text = text[:REASON_CHARS].rsplit(" ", 1)[0].rstrip(" ,;:") + "..."
        shown.append(f"rank {v.index + 1}: {text}")
    more = len(verdicts) - len(shown)
    tail = f"; and {more} more" if more > 0 else ""
    return "; ".join(shown) + tail


def _positions(verdicts: Sequence[Verdict], summary: PrecisionSummary) -> str:
    k = summary.k
    if summary.relevant_count == 0:
        return "With no relevant context, MAP is 0."
    last_relevant = max(v.index for v in verdicts if v.relevant)
    trailing = [v.index + 1 for v in verdicts if not v.relevant and v.index > last_relevant]
    trailing_note = ""
    if trailing:
        trailing_note = (
            f" The irrelevant {'context' if len(trailing) == 1 else 'contexts'} after the last relevant one "
            f"({_ranks('ranks', trailing)}) do{'es' if len(trailing) == 1 else ''} not change MAP, "
            f"but precision@{k} is {summary.precision_at_k:.2f}."
        )
    # Relevant contexts that had irrelevant ones ranked above them are what lowers MAP.
    demoted: list[tuple[int, int]] = []
    irrelevant_above = 0
    for v in verdicts:
        if v.relevant:
            if irrelevant_above:
                demoted.append((v.index + 1, irrelevant_above))
        else:
            irrelevant_above += 1
    if not demoted:
        lead = (
            "The relevant context was ranked first"
            if summary.relevant_count == 1
            else f"The {summary.relevant_count} relevant contexts were ranked first"
        )
        return lead + ", so MAP is at its maximum." + trailing_note
    rank, above = demoted[0]
    if rank == summary.first_relevant_rank:
        text = f"The first relevant context only came at rank {rank}, after {_plural(above, 'irrelevant one')}"
    else:
        text = f"The relevant context at rank {rank} came after {_plural(above, 'irrelevant one')}"
    if len(demoted) > 1:
        text += f", and {_plural(len(demoted) - 1, 'more relevant context')} ranked below irrelevant ones"
    return text + ", which lowered MAP." + trailing_note


def build_reason(
    *,
    score: float,
    verdicts: Sequence[Verdict],
    summary: PrecisionSummary,
    reference_kind: ReferenceKind,
    truncated_contexts: int = 0,
    max_context_chars: int | None = None,
) -> str:
    target = _TARGET.get(reference_kind, "the reference")
    relevant = [v for v in verdicts if v.relevant]
    irrelevant = [v for v in verdicts if not v.relevant]
    k = summary.k
    if not relevant:
        head = f"none of the {_plural(k, 'retrieved context')} were relevant to {target}" if k > 1 else (
            f"the only retrieved context was not relevant to {target}"
        )
    elif not irrelevant:
        head = f"all {_plural(k, 'retrieved context')} were relevant to {target}" if k > 1 else (
            f"the only retrieved context was relevant to {target}"
        )
    else:
        head = (
            f"{len(relevant)} of {k} retrieved contexts {_was(len(relevant))} relevant to {target} "
            f"({_ranks('ranks', [v.index + 1 for v in relevant])}) and {len(irrelevant)} "
            f"{_was(len(irrelevant))} not ({_ranks('ranks', [v.index + 1 for v in irrelevant])})"
        )
    sentences = [f"The score is {format_score(score)} because {head}."]
    if relevant:
        sentences.append(f"Relevant: {_quote(relevant)}.")
    if irrelevant:
        sentences.append(f"Not relevant: {_quote(irrelevant)}.")
    sentences.append(_positions(verdicts, summary))
    if truncated_contexts:
        limit = f" to {max_context_chars} characters" if max_context_chars else ""
        sentences.append(
            f"{_plural(truncated_contexts, 'context')} {_was(truncated_contexts)} "
            f"truncated{limit} before judging, so {'its' if truncated_contexts == 1 else 'their'} verdicts rest on the "
            "beginning of the text only."
        )
    return " ".join(sentences)
