"""The right top-k (scorer.top_k): smallest k keeping 95% of the relevant contexts, and the saving."""
from __future__ import annotations

import random

import pytest

from ctxprec.scorer.top_k import RankCounts, recommend_top_k


def low_ranks_rarely_relevant(requests: int, seed: int = 5) -> tuple[list[RankCounts], list[list[int]]]:
    """Ten contexts per request; ranks 1-5 relevant 60% of the time, ranks 6-10 2%; every context
    a random size. Returns the counts by rank and the sizes, request by request."""
    rng = random.Random(seed)
    judged = [0] * 10
    relevant = [0] * 10
    chars = [0] * 10
    sizes: list[list[int]] = []
    for _ in range(requests):
        row = []
        for i in range(10):
            size = rng.randint(200, 1800)
            row.append(size)
            judged[i] += 1
            chars[i] += size
            if rng.random() < (0.6 if i < 5 else 0.02):
                relevant[i] += 1
        sizes.append(row)
    return [RankCounts(i + 1, judged[i], relevant[i], chars[i]) for i in range(10)], sizes


def test_ranks_six_to_ten_relevant_two_percent_of_the_time_give_k_5() -> None:
    ranks, sizes = low_ranks_rarely_relevant(4000)
    advice = recommend_top_k(ranks, requests=4000)
    assert advice.recommended_k == 5
    assert advice.curve[3].kept_share < 0.95 <= advice.curve[4].kept_share
    assert [p.k for p in advice.curve] == list(range(1, 11))
    assert advice.curve[-1].kept_share == 1.0
    # The saving is the contexts after rank 5, at their actual sizes.
    expected_tokens = sum(sum(row[5:]) for row in sizes) / 4 / 4000
    assert advice.saved_tokens_per_request == pytest.approx(expected_tokens, rel=1e-12)
    assert advice.saved_contexts_per_request == pytest.approx(5.0)
    assert advice.curve[4].tokens_per_request == pytest.approx(sum(sum(row[:5]) for row in sizes) / 4 / 4000)


def test_the_smallest_k_at_exactly_the_threshold_is_taken() -> None:
    # 19 of 20 relevant contexts at rank 1: kept(1) = 0.95 exactly.
    advice = recommend_top_k([RankCounts(1, 20, 19, 100), RankCounts(2, 20, 1, 100)], requests=20)
    assert advice.recommended_k == 1
    assert advice.saved_contexts_per_request == pytest.approx(1.0)
    assert advice.saved_tokens_per_request == pytest.approx(100 / 4 / 20)
    # Asking to keep everything needs rank 2 too, and then nothing is saved.
    strict = recommend_top_k([RankCounts(1, 20, 19, 100), RankCounts(2, 20, 1, 100)], requests=20, keep=1.0)
    assert strict.recommended_k == 2 and strict.saved_contexts_per_request == 0.0 and strict.saved_tokens_per_request == 0.0


def test_no_recommendation_without_enough_relevant_contexts() -> None:
    nothing = recommend_top_k([RankCounts(1, 10, 0, 50), RankCounts(2, 10, 0, 50)], requests=10)
    assert nothing.recommended_k is None and nothing.saved_tokens_per_request is None
    assert all(p.kept_share == 0.0 for p in nothing.curve)
    few = recommend_top_k([RankCounts(1, 10, 3, 50)], requests=10, min_relevant=5)
    assert few.recommended_k is None
    assert recommend_top_k([], requests=0).recommended_k is None


def test_unknown_sizes_still_give_k_and_saved_contexts_but_no_tokens() -> None:
    advice = recommend_top_k([RankCounts(1, 10, 9), RankCounts(2, 10, 0), RankCounts(3, 5, 0)], requests=10)
    assert advice.recommended_k == 1
    assert advice.saved_contexts_per_request == pytest.approx(1.5)
    assert advice.saved_tokens_per_request is None
    assert advice.curve[0].tokens_per_request is None


def test_missing_ranks_count_as_nothing_and_bad_ranks_are_refused() -> None:
    advice = recommend_top_k([RankCounts(3, 4, 4, 40), RankCounts(1, 4, 0, 40)], requests=4)
    assert advice.recommended_k == 3 and advice.max_rank == 3
    assert advice.to_dict()["curve"][1] == {"k": 2, "kept_share": 0.0, "contexts_per_request": 1.0, "tokens_per_request": 2.5}
    with pytest.raises(ValueError):
        recommend_top_k([RankCounts(0, 1, 1)], requests=1)
    with pytest.raises(ValueError):
        recommend_top_k([RankCounts(1, 1, 1), RankCounts(1, 1, 1)], requests=1)
    with pytest.raises(ValueError):
        recommend_top_k([RankCounts(1, 1, 1)], requests=1, keep=0)
