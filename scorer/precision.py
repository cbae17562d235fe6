"""Context precision arithmetic (SPEC.md section 2): MAP over judged relevance, and the
companion figures computed from the same verdicts. Pure functions, exact arithmetic.

MAP is computed with `Fraction` and rounded with `Decimal` so that a value that is exactly
half-way (0.125, 0.835) rounds up, and a value that merely prints like one (0.8333...) does not."""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
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


def average_precision(relevance: Sequence[bool]) -> Fraction:
    """(sum over relevant positions i of relevant_so_far / (i + 1)) / R; 0 when R = 0."""
    total = Fraction(0)
    so_far = 0
    for position, relevant in enumerate(relevance):
        if relevant:
            so_far += 1
            total += Fraction(so_far, position + 1)
    return total / so_far if so_far else Fraction(0)


def round_half_up(value: Fraction | float | int, places: int = 2) -> float:
    exact = value if isinstance(value, Fraction) else Fraction(value)
    with localcontext() as ctx:
        ctx.prec = 60  # far beyond any MAP denominator we meet; the quantize below decides
        as_decimal = Decimal(exact.numerator) / Decimal(exact.denominator)
        rounded = as_decimal.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return float(rounded)


def _exact_scale(scale: float) -> Fraction:
    # Through repr so that scale=0.1 means the decimal 0.1 the user wrote, not its binary neighbour.
    return Fraction(repr(scale)) if isinstance(scale, float) else Fraction(scale)


def scaled_score(relevance: Sequence[bool], scale: float = 1) -> float:
    if not scale:
        return 0.0
    return round_half_up(average_precision(relevance) * _exact_scale(scale))


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
    ap = average_precision(flags)
    relevant_count = sum(flags)
    return PrecisionSummary(
        score=round_half_up(ap * _exact_scale(scale)) if scale else 0.0,
        average_precision=ap,
        precision_at_k=precision_at_k(flags),
        hit=relevant_count > 0,
        first_relevant_rank=first_relevant_rank(flags),
        relevant_count=relevant_count,
        k=len(flags),
    )
