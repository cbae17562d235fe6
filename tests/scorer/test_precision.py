"""MAP and its companions against the definition and hand-computed golden vectors."""
from __future__ import annotations

from fractions import Fraction

import pytest
from ctxprec.scorer.precision import (
    average_precision,
    round_half_up,
    scaled_score,
    summarize,
    validate_scale,
)
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([1], 1.0),
        ([0, 1], 0.5),
        ([1, 0, 1], 0.83),  # (1 + 2/3) / 2
        ([1, 0, 1, 0], 0.83),  # the documented example: exactly 0.8333..., not 0.835
        ([1, 1, 0, 1], 0.92),  # (1 + 1 + 3/4) / 3 = 0.9166...
        ([0, 0, 1, 1, 1], 0.48),  # (1/3 + 2/4 + 3/5) / 3 = 0.4777...
        ([0, 0, 0], 0.0),
        ([0], 0.0),
    ],
)
def test_golden_vectors(flags: list[int], expected: float) -> None:
    assert scaled_score([bool(f) for f in flags]) == expected


def test_exact_average_precision() -> None:
    assert average_precision([True, False, True, False]) == Fraction(5, 6)
    assert average_precision([False, False]) == 0


def test_scale_multiplies_before_rounding() -> None:
    assert scaled_score([True, False, True], 10) == 8.33
    assert scaled_score([True, True, False, True], 10) == 9.17
    assert scaled_score([True], 5) == 5.0
    assert scaled_score([True, False, True], 0) == 0.0
    assert scaled_score([False, True], 0.1) == 0.05


def test_round_half_up_only_on_exact_halves() -> None:
    assert round_half_up(Fraction(1, 8)) == 0.13
    assert round_half_up(Fraction(835, 1000)) == 0.84
    assert round_half_up(Fraction(8333, 10000)) == 0.83
    assert round_half_up(Fraction(5, 6)) == 0.83
    # MAP 1/4 at scale 0.5 is exactly 0.125: half up, not banker's rounding.
    assert scaled_score([False, False, False, True], 0.5) == 0.13


def test_summary_companions() -> None:
    s = summarize([False, True, False, True], scale=1)
    assert (s.score, s.precision_at_k, s.hit, s.first_relevant_rank, s.relevant_count, s.k) == (0.5, 0.5, True, 2, 2, 4)
    none = summarize([False, False], scale=1)
    assert (none.score, none.hit, none.first_relevant_rank, none.relevant_count) == (0.0, False, None, 0)
    # MAP ignores irrelevant items after the last relevant one; precision@k does not.
    tail = summarize([True, False, False, False])
    assert tail.score == 1.0 and tail.precision_at_k == 0.25


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1", True, None])
def test_bad_scale_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="scale: must be a finite number >= 0"):
        validate_scale(bad)


@given(st.lists(st.booleans(), min_size=1, max_size=30), st.data())
def test_promoting_a_relevant_item_never_lowers_map(flags: list[bool], data: st.DataObject) -> None:
    ap = average_precision(flags)
    assert 0 <= ap <= 1
    swaps = [i for i in range(1, len(flags)) if flags[i] and not flags[i - 1]]
    if swaps:
        i = data.draw(st.sampled_from(swaps))
        promoted = list(flags)
        promoted[i - 1], promoted[i] = True, False
        assert average_precision(promoted) > ap
    if any(flags):
        assert (ap == 1) == (flags[: sum(flags)] == [True] * sum(flags))


def _reference_score(flags: list[bool], scale: float) -> float:
    """The definition, spelled out with Fraction at every step and Decimal rounding (the way the
    scorer computed it before it moved to integer arithmetic)."""
    from decimal import ROUND_HALF_UP, Decimal, localcontext

    total, so_far = Fraction(0), 0
    for position, relevant in enumerate(flags):
        if relevant:
            so_far += 1
            total += Fraction(so_far, position + 1)
    ap = total / so_far if so_far else Fraction(0)
    exact = ap * (Fraction(repr(scale)) if isinstance(scale, float) else Fraction(scale))
    with localcontext() as ctx:
        ctx.prec = 60
        value = Decimal(exact.numerator) / Decimal(exact.denominator)
        return float(value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


@given(st.lists(st.booleans(), max_size=40),
       st.one_of(st.integers(min_value=0, max_value=1000),
                 st.floats(min_value=0, max_value=1000, allow_nan=False, allow_infinity=False)))
def test_integer_arithmetic_matches_the_fraction_and_decimal_definition(flags: list[bool], scale: float) -> None:
    expected = _reference_score(flags, scale)
    assert scaled_score(flags, scale) == expected
    assert summarize(flags, scale).score == expected
