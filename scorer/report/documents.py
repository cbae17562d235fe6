"""Per-document and per-rank figures for the report: the documents most often judged irrelevant,
the documents never judged relevant, and the right top-k.

Documents are counted by the `document` key of each verdict (scorer.documents); records written
before verdicts carried it are counted in the rank figures but not by document, and the report
says how many verdicts that left out. Counts here are exact: the report holds its records anyway.
Score records carry no context sizes, so the top-k saving is given in contexts per request; the
live sidecar, which sees the texts, also gives it in tokens."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from ctxprec.scorer.top_k import DEFAULT_KEEP, DEFAULT_MIN_RELEVANT, RankCounts, TopKAdvice, recommend_top_k

NOISY_SHOWN = 20
NEVER_RELEVANT_SHOWN = 20
# A document retrieved once and judged irrelevant once says little; "never relevant" lists the
# ones that had several chances.
NEVER_RELEVANT_MIN_RETRIEVED = 2


@dataclass
class DocumentRow:
    document: str
    retrieved: int
    relevant: int
    rank_sum: int
    preview: str | None = None  # the first words of a document named by a hash, from its verdicts

    @property
    def irrelevant(self) -> int:
        return self.retrieved - self.relevant

    @property
    def irrelevant_rate(self) -> float:
        return self.irrelevant / self.retrieved if self.retrieved else 0.0

    @property
    def mean_rank(self) -> float:
        return self.rank_sum / self.retrieved if self.retrieved else 0.0


@dataclass
class DocumentFigures:
    named_verdicts: int = 0  # verdicts that carry a document
    unnamed_verdicts: int = 0  # verdicts of records made before documents were named
    distinct: int = 0
    noisy: list[DocumentRow] = field(default_factory=list)  # most irrelevant verdicts first
    never_relevant: list[DocumentRow] = field(default_factory=list)  # most retrieved first
    never_relevant_count: int = 0  # with at least NEVER_RELEVANT_MIN_RETRIEVED retrievals


@dataclass
class TopKRow:
    service: str
    retriever: str
    advice: TopKAdvice


@dataclass
class TopKFigures:
    overall: TopKAdvice | None = None
    pairs: list[TopKRow] = field(default_factory=list)


def document_figures(scored: Sequence[dict[str, Any]]) -> DocumentFigures:
    figures = DocumentFigures()
    rows: dict[str, DocumentRow] = {}
    for record in scored:
        for verdict in record.get("verdicts") or []:
            document = verdict.get("document")
            if not isinstance(document, str) or not document:
                figures.unnamed_verdicts += 1
                continue
            figures.named_verdicts += 1
            row = rows.get(document)
            if row is None:
                row = rows[document] = DocumentRow(document, 0, 0, 0)
            row.retrieved += 1
            row.rank_sum += verdict["index"] + 1
            preview = verdict.get("preview")
            if row.preview is None and isinstance(preview, str) and preview:
                row.preview = preview
            if verdict["relevant"]:
                row.relevant += 1
    figures.distinct = len(rows)
    noisy = [r for r in rows.values() if r.irrelevant > 0]
    noisy.sort(key=lambda r: (-r.irrelevant, -r.irrelevant_rate, r.document))
    figures.noisy = noisy[:NOISY_SHOWN]
    never = [r for r in rows.values() if r.relevant == 0 and r.retrieved >= NEVER_RELEVANT_MIN_RETRIEVED]
    never.sort(key=lambda r: (-r.retrieved, r.document))
    figures.never_relevant_count = len(never)
    figures.never_relevant = never[:NEVER_RELEVANT_SHOWN]
    return figures


def top_k_figures(scored: Sequence[dict[str, Any]]) -> TopKFigures:
    """The recommendation over all records, and per (service, retriever)."""
    overall = _Counts()
    by_pair: dict[tuple[str, str], _Counts] = defaultdict(_Counts)
    for record in scored:
        verdicts = record.get("verdicts") or []
        if not verdicts:
            continue
        key = (_text(record.get("service")), _text(record.get("retriever")))
        overall.add(verdicts)
        by_pair[key].add(verdicts)
    figures = TopKFigures()
    if overall.requests:
        figures.overall = overall.advice()
        figures.pairs = [TopKRow(service, retriever, counts.advice()) for (service, retriever), counts in sorted(by_pair.items())]
    return figures


class _Counts:
    def __init__(self) -> None:
        self.requests = 0
        self.judged: dict[int, int] = defaultdict(int)
        self.relevant: dict[int, int] = defaultdict(int)

    def add(self, verdicts: list[dict[str, Any]]) -> None:
        self.requests += 1
        for verdict in verdicts:
            rank = verdict["index"] + 1
            self.judged[rank] += 1
            if verdict["relevant"]:
                self.relevant[rank] += 1

    def advice(self) -> TopKAdvice:
        ranks = [RankCounts(rank, self.judged[rank], self.relevant.get(rank, 0)) for rank in sorted(self.judged)]
        return recommend_top_k(ranks, requests=self.requests, keep=DEFAULT_KEEP, min_relevant=DEFAULT_MIN_RELEVANT)


def _text(value: Any) -> str:
    return value if isinstance(value, str) and value else "(none)"
