"""Context precision arithmetic: MAP over judged relevance, and the
companion figures computed from the same verdicts. Pure functions, exact arithmetic.

MAP is computed exactly (integer numerator and denominator, a `Fraction` at the end) and rounded
in integers, so that a value that is exactly half-way (0.125, 0.835) rounds up, and a value that
merely prints like one (0.8333...) does not. Integers rather than `Fraction` arithmetic at every
step and `Decimal` rounding: this runs once per scored sample, and those cost several times more."""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence


@dataclass(frozen=True, slots=True)
class PrecisionSummary:
    score: float  # MAP * scale, rounded half up to 2 decimals
    average_precision: Fraction  # exact, unscaled
    precision_at_k: float
    hit: bool
    first_relevant_rank: int | None  # 1-based
    relevant_count: int
    k: int


def validate_scale(scale: object) -> float:
    """The score is multiplied by `scale`; it must be a finite number >= 0."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale < 0:
        raise ValueError(f"scale: must be a finite number >= 0, got {scale!r}")
    return float(scale) if isinstance(scale, float) else scale  # keep ints as ints for display


def _average_precision_parts(relevance: Sequence[bool]) -> tuple[int, int]:
    """MAP as (numerator, denominator), not reduced; (0, 1) when nothing is relevant."""
    numerator, denominator, so_far = 0, 1, 0
    for position, relevant in enumerate(relevance, start=1):
        if relevant:
            so_far += 1
            # numerator/denominator + so_far/position
            numerator = numerator * position + so_far * denominator
            denominator *= position
    return (numerator, denominator * so_far) if so_far else (0, 1)


def average_precision(relevance: Sequence[bool]) -> Fraction:
    """(sum over relevant positions i of relevant_so_far / (i + 1)) / R; 0 when R = 0."""
    return Fraction(*_average_precision_parts(relevance))


def _round_ratio_half_up(numerator: int, denominator: int, places: int) -> float:
    """numerator/denominator (denominator > 0) to `places` decimals, ties away from zero."""
    unit = 10 ** places
    sign = -1 if numerator < 0 else 1
    quotient, remainder = divmod(abs(numerator) * unit, denominator)
    if 2 * remainder >= denominator:
        quotient += 1
    return sign * quotient / unit  # int / int is correctly rounded to the nearest float


def round_half_up(value: Fraction | float | int, places: int = 2) -> float:
    exact = value if isinstance(value, Fraction) else Fraction(value)
    return _round_ratio_half_up(exact.numerator, exact.denominator, places)


def _exact_scale(scale: float) -> Fraction:
    # Through repr so that scale=0.1 means the decimal 0.1 the user wrote, not its binary neighbour.
    return Fraction(repr(scale)) if isinstance(scale, float) else Fraction(scale)


def _scaled(parts: tuple[int, int], scale: float) -> float:
    if not scale:
        return 0.0
    numerator, denominator = parts
    exact = _exact_scale(scale)
    return _round_ratio_half_up(numerator * exact.numerator, denominator * exact.denominator, 2)


def scaled_score(relevance: Sequence[bool], scale: float = 1) -> float:
    return _scaled(_average_precision_parts(relevance), scale)


def precision_at_k(relevance: Sequence[bool]) -> float:
    return sum(1 for r in relevance if r) / len(relevance) if relevance else 0.0


def first_relevant_rank(relevance: Sequence[bool]) -> int | None:
    for position, relevant in enumerate(relevance):
        if relevant:
            return position + 1
    return None


def summarize(relevance: Sequence[bool], scale: float = 1) -> PrecisionSummary:
    validate_scale(scale)
    flags = [bool(r) for r in relevance]
    parts = _average_precision_parts(flags)
    relevant_count = sum(flags)
    return PrecisionSummary(
        score=_scaled(parts, scale),
        average_precision=Fraction(*parts),
        precision_at_k=precision_at_k(flags),
        hit=relevant_count > 0,
        first_relevant_rank=first_relevant_rank(flags),
        relevant_count=relevant_count,
        k=len(flags),
    )
