"""Synthetic scored retrievals with known answers, shared by the diagnostics tests."""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Iterator

from ctxprec.collector.model import Decision, Outcome, Retrieval, RetrievedContext
from ctxprec.scorer.precision import scaled_score
from ctxprec.scorer.result import ScoreResult, Verdict

DOCUMENTS = 5000
PER_RETRIEVAL = 5
# Popularity ranks (1 = most retrieved) of the planted noisy documents: among the popular ones,
# interleaved with popular documents that are fine.
NOISY_POPULARITY = (2, 4, 6, 8, 10)
NOISY_IRRELEVANT = 0.9
POPULAR_IRRELEVANT = 0.05  # the first 100 by popularity: popular because they are useful
TAIL_IRRELEVANT = 0.3


@dataclass
class Scored:
    """One retrieval as the judge saw it: documents in rank order and their verdicts."""

    documents: list[str]
    relevant: list[bool]
    contents: list[str] = field(default_factory=list)


def document_name(popularity: int) -> str:
    return f"doc-{popularity:04d}"


NOISY = frozenset(document_name(p) for p in NOISY_POPULARITY)


def zipf_stream(count: int, *, seed: int = 16) -> Iterator[Scored]:
    """`count` retrievals of 5 distinct documents out of 5,000 with Zipf(1) popularity."""
    rng = random.Random(seed)
    weights = [1.0 / rank for rank in range(1, DOCUMENTS + 1)]
    cumulative = list(itertools.accumulate(weights))
    for _ in range(count):
        chosen: list[int] = []
        while len(chosen) < PER_RETRIEVAL:
            (pick,) = rng.choices(range(1, DOCUMENTS + 1), cum_weights=cumulative, k=1)
            if pick not in chosen:
                chosen.append(pick)
        relevant = []
        for popularity in chosen:
            if popularity in NOISY_POPULARITY:
                p_irrelevant = NOISY_IRRELEVANT
            elif popularity <= 100:
                p_irrelevant = POPULAR_IRRELEVANT
            else:
                p_irrelevant = TAIL_IRRELEVANT
            relevant.append(rng.random() >= p_irrelevant)
        names = [document_name(p) for p in chosen]
        yield Scored(names, relevant, [f"Text of {name}: how to reset a password, write to owner-{name}@example.com"
                                       for name in names])


def outcome(scored: Scored, *, service: str = "shop", retriever: str = "kb", with_ids: bool = True,
            attributes: dict[str, object] | None = None, score: float | None = None) -> Outcome:
    """An evaluated Outcome as the scoring workers hand it to the result sinks."""
    contexts = [RetrievedContext(content=text, id=name if with_ids else None)
                for name, text in zip(scored.documents, scored.contents or [""] * len(scored.documents))]
    retrieval = Retrieval(trace_id="0" * 31 + "1", span_id="0" * 15 + "1", service=service, query="q",
                          contexts=contexts, retriever=retriever, attributes=dict(attributes or {}))
    verdicts = [Verdict(i, rel, "") for i, rel in enumerate(scored.relevant)]
    value = scaled_score(scored.relevant) if score is None else score
    relevant_count = sum(scored.relevant)
    result = ScoreResult(score=value, reason="", verdicts=verdicts, precision_at_k=relevant_count / len(verdicts),
                         hit=relevant_count > 0, first_relevant_rank=None, relevant_count=relevant_count,
                         k=len(verdicts), scale=1.0, reference_kind="output")
    return Outcome(retrieval, Decision.EVALUATED, result, None, {})
