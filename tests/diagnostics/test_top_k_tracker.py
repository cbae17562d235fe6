"""The running top-k counts: deep ranks fold into the last one, and halving forgets the past
without moving the recommendation of a steady stream."""
from __future__ import annotations

import pytest

from ctxprec.collector.diagnostics.top_k import TopKTracker
from ctxprec.scorer.result import Verdict


def verdicts(relevant: list[bool]) -> list[Verdict]:
    return [Verdict(i, r, "") for i, r in enumerate(relevant)]


def test_ranks_beyond_max_rank_count_at_the_last_rank() -> None:
    tracker = TopKTracker(max_rank=3, min_relevant=1)
    tracker.observe("s", "r", verdicts([True, False, False, False, True]), [10, 10, 10, 10, 40])
    tally = tracker.tally("s", "r")
    assert tally is not None
    assert tally.judged == [1, 1, 3] and tally.relevant == [1, 0, 1] and tally.chars == [10, 10, 60]
    advice = tracker.advice("s", "r")
    assert advice is not None and advice.recommended_k == 3


def test_halving_keeps_the_ratios_and_follows_a_change() -> None:
    tracker = TopKTracker(halve_every=100, min_relevant=1)
    for _ in range(99):
        tracker.observe("s", "r", verdicts([True, False]), [100, 300])
    before = tracker.advice("s", "r")
    tracker.observe("s", "r", verdicts([True, False]), [100, 300])  # the 100th: halved
    tally = tracker.tally("s", "r")
    assert tally is not None and tally.requests == 50
    after = tracker.advice("s", "r")
    assert before is not None and after is not None
    assert after.recommended_k == before.recommended_k == 1
    assert after.saved_tokens_per_request == pytest.approx(before.saved_tokens_per_request) == 75
    # The retriever changes: now rank 2 holds the relevant context. Old counts fade.
    for _ in range(400):
        tracker.observe("s", "r", verdicts([False, True]), [100, 300])
    changed = tracker.advice("s", "r")
    assert changed is not None and changed.recommended_k == 2


def test_advice_is_cached_until_new_counts() -> None:
    tracker = TopKTracker(min_relevant=1)
    assert tracker.advice("s", "r") is None
    assert tracker.observe("s", "r", verdicts([True]), [4]) is True
    first = tracker.advice("s", "r")
    assert tracker.advice("s", "r") is first
    assert tracker.observe("s", "r", verdicts([True]), [4]) is False
    assert tracker.advice("s", "r") is not first
