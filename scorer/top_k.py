"""The right top-k: from relevance by rank, the smallest k that keeps most relevant contexts.

Input is what the verdicts say per 1-based rank: how many contexts were judged there, how many of
them relevant and (when known) how many characters they held. If the retriever returned only its
first k contexts, the relevant ones at ranks <= k would still reach the LLM; the share kept is

    kept(k) = relevant(1..k) / relevant(all ranks)

and the recommended k is the smallest with kept(k) >= `keep` (95% by default), once at least
`min_relevant` (30) relevant contexts were seen. Cutting to it saves the contexts ranked after k:
per request, their count and their characters / 4 as tokens (a rough rule for English text that
needs no tokenizer).

This is the one top-k rule (docs/DIAGNOSTICS.md, "The right top-k"): the report,
`/diagnostics/top_k`, `ctxprec_recommended_k` and the demo all call `recommend_top_k` with
`DEFAULT_KEEP` and `DEFAULT_MIN_RELEVANT`, and say it in `RULE`'s words."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

DEFAULT_KEEP = 0.95
# A k read off a handful of verdicts would move with every new one.
DEFAULT_MIN_RELEVANT = 30
RULE = f"the smallest k that keeps at least {DEFAULT_KEEP:.0%} of the relevant contexts"
CHARS_PER_TOKEN = 4.0
# kept(k) is a ratio of sums; without slack, 0.95 computed as 19/20 could land just below 0.95.
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class RankCounts:
    """What was judged at one 1-based rank. Counts may be fractional (decayed running counts)."""

    rank: int
    judged: float
    relevant: float
    chars: float | None = None  # total characters of the contexts judged at this rank; None if unknown


@dataclass(frozen=True, slots=True)
class CurvePoint:
    k: int
    kept_share: float  # share of the relevant contexts at ranks <= k
    contexts_per_request: float  # contexts a request would still send with this k
    tokens_per_request: float | None  # their estimated tokens, None when sizes are unknown


@dataclass(frozen=True, slots=True)
class TopKAdvice:
    recommended_k: int | None  # None: too few relevant contexts seen to say
    keep: float
    requests: float
    relevant: float
    judged: float
    max_rank: int
    curve: tuple[CurvePoint, ...]
    saved_contexts_per_request: float
    saved_tokens_per_request: float | None  # None when sizes are unknown or there is no recommendation

    def to_dict(self) -> dict[str, object]:
        return {
            "recommended_k": self.recommended_k,
            "keep": self.keep,
            "requests": _round(self.requests),
            "relevant": _round(self.relevant),
            "judged": _round(self.judged),
            "max_rank": self.max_rank,
            "saved_contexts_per_request": _round(self.saved_contexts_per_request),
            "saved_tokens_per_request": None if self.saved_tokens_per_request is None else _round(self.saved_tokens_per_request),
            "curve": [
                {"k": p.k, "kept_share": _round(p.kept_share), "contexts_per_request": _round(p.contexts_per_request),
                 "tokens_per_request": None if p.tokens_per_request is None else _round(p.tokens_per_request)}
                for p in self.curve
            ],
        }


def tokens_from_chars(chars: float) -> float:
    return chars / CHARS_PER_TOKEN


def recommend_top_k(
    ranks: Sequence[RankCounts],
    *,
    requests: float,
    keep: float = DEFAULT_KEEP,
    min_relevant: float = 1.0,
) -> TopKAdvice:
    """The curve of share kept vs k, the smallest k keeping at least `keep` of the relevant
    contexts, and what cutting to it saves per request (`requests` = retrievals the counts came
    from). No recommendation while fewer than `min_relevant` relevant contexts were seen: a k read
    off a handful of verdicts would move with every new one."""
    if not 0 < keep <= 1:
        raise ValueError(f"keep must be in (0, 1], got {keep!r}")
    dense = _dense(ranks)
    judged_total = sum(r.judged for r in dense)
    relevant_total = sum(r.relevant for r in dense)
    chars_known = all(r.chars is not None for r in dense)
    per_request = 1.0 / requests if requests > 0 else 0.0

    curve: list[CurvePoint] = []
    kept = 0.0
    # What stays sent with k = everything at ranks <= k, built up rank by rank.
    contexts_sent = 0.0
    chars_sent = 0.0
    for r in dense:
        kept += r.relevant
        contexts_sent += r.judged
        if chars_known:
            chars_sent += r.chars or 0.0
        curve.append(CurvePoint(
            k=r.rank,
            kept_share=kept / relevant_total if relevant_total > 0 else 0.0,
            contexts_per_request=contexts_sent * per_request,
            tokens_per_request=tokens_from_chars(chars_sent) * per_request if chars_known else None,
        ))

    recommended: int | None = None
    if relevant_total > 0 and relevant_total >= min_relevant and requests > 0:
        recommended = next(p.k for p in curve if p.kept_share >= keep - _EPSILON)
    saved_contexts = 0.0
    saved_tokens: float | None = None
    if recommended is not None:
        at_k = curve[recommended - 1]
        everything = curve[-1]
        saved_contexts = everything.contexts_per_request - at_k.contexts_per_request
        if chars_known and everything.tokens_per_request is not None and at_k.tokens_per_request is not None:
            saved_tokens = everything.tokens_per_request - at_k.tokens_per_request
    return TopKAdvice(
        recommended_k=recommended,
        keep=keep,
        requests=requests,
        relevant=relevant_total,
        judged=judged_total,
        max_rank=len(dense),
        curve=tuple(curve),
        saved_contexts_per_request=max(0.0, saved_contexts),
        saved_tokens_per_request=None if saved_tokens is None else max(0.0, saved_tokens),
    )


def _dense(ranks: Sequence[RankCounts]) -> list[RankCounts]:
    """Ranks 1..max in order, with the missing ones as zero counts (they kept nothing)."""
    by_rank: dict[int, RankCounts] = {}
    for r in ranks:
        if r.rank < 1:
            raise ValueError(f"ranks are 1-based, got {r.rank}")
        if r.rank in by_rank:
            raise ValueError(f"rank {r.rank} given twice")
        by_rank[r.rank] = r
    top = max(by_rank, default=0)
    return [by_rank.get(rank) or RankCounts(rank, 0.0, 0.0, 0.0) for rank in range(1, top + 1)]


def _round(value: float) -> float:
    return round(value, 4)
