"""The template reason, word for word: counts and verbs agree ("1 of 3 ... was", "2 of 3 ...
were", "none of the 3 ... were"), whatever mix of verdicts it describes."""
from __future__ import annotations

import re

import pytest

from ctxprec.scorer.precision import summarize
from ctxprec.scorer.reason import build_reason
from ctxprec.scorer.result import Verdict


def reason(pattern: list[bool], *, reference_kind: str = "output", truncated: int = 0) -> str:
    verdicts = [Verdict(i, relevant, f"why {i + 1}") for i, relevant in enumerate(pattern)]
    summary = summarize(pattern)
    return build_reason(
        score=summary.score,
        verdicts=verdicts,
        summary=summary,
        reference_kind=reference_kind,  # type: ignore[arg-type]
        truncated_contexts=truncated,
        max_context_chars=100 if truncated else None,
    )


GOLDEN = [
    (
        [False, True, False],
        "The score is 0.5 because 1 of 3 retrieved contexts was relevant to the generated output (rank 2) "
        "and 2 were not (ranks 1, 3). Relevant: rank 2: why 2. Not relevant: rank 1: why 1; rank 3: why 3. "
        "The first relevant context only came at rank 2, after 1 irrelevant one, which lowered MAP. "
        "The irrelevant context after the last relevant one (rank 3) does not change MAP, but precision@3 is 0.33.",
    ),
    (
        [True, False, True],
        "The score is 0.83 because 2 of 3 retrieved contexts were relevant to the generated output (ranks 1, 3) "
        "and 1 was not (rank 2). Relevant: rank 1: why 1; rank 3: why 3. Not relevant: rank 2: why 2. "
        "The relevant context at rank 3 came after 1 irrelevant one, which lowered MAP.",
    ),
    (
        [False, False, False],
        "The score is 0 because none of the 3 retrieved contexts were relevant to the generated output. "
        "Not relevant: rank 1: why 1; rank 2: why 2; rank 3: why 3. With no relevant context, MAP is 0.",
    ),
    (
        [True, True],
        "The score is 1 because all 2 retrieved contexts were relevant to the generated output. "
        "Relevant: rank 1: why 1; rank 2: why 2. The 2 relevant contexts were ranked first, so MAP is at its maximum.",
    ),
    (
        [True],
        "The score is 1 because the only retrieved context was relevant to the generated output. "
        "Relevant: rank 1: why 1. The relevant context was ranked first, so MAP is at its maximum.",
    ),
    (
        [False],
        "The score is 0 because the only retrieved context was not relevant to the generated output. "
        "Not relevant: rank 1: why 1. With no relevant context, MAP is 0.",
    ),
]


@pytest.mark.parametrize(("pattern", "text"), GOLDEN, ids=[str(p) for p, _ in GOLDEN])
def test_golden_reasons(pattern: list[bool], text: str) -> None:
    assert reason(pattern) == text


def test_truncation_note_agrees_in_number() -> None:
    assert "1 context was truncated to 100 characters before judging, so its verdicts" in reason([True], truncated=1)
    assert "2 contexts were truncated to 100 characters before judging, so their verdicts" in reason([True, True], truncated=2)


@pytest.mark.parametrize("k", range(1, 7))
def test_every_count_agrees_with_its_verb(k: int) -> None:
    """All 2**k verdict patterns: wherever the reason says "N of K ..." or "N was/were", N decides the verb."""
    checked = 0
    for bits in range(2 ** k):
        pattern = [bool(bits >> i & 1) for i in range(k)]
        text = reason(pattern)
        counted = re.findall(r"\b(\d+) of \d+ retrieved contexts (was|were)\b", text)
        counted += re.findall(r"\band (\d+) (was|were) not\b", text)
        for count, verb in counted:
            assert verb == ("was" if count == "1" else "were"), text
        checked += len(counted)
        assert not re.search(r"\bnone of the \d+ retrieved contexts was\b", text), text
    assert checked > 0 or k == 1  # the phrases checked occur in these reasons (one context has no count)
