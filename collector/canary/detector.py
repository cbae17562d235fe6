"""When has the judge changed? The canary rule, in plain arithmetic (no I/O).

At the baseline the canary set is judged twice. A context answered the same way both times is
*stable*, and its verdict is the baseline's; one answered differently is left out of later
comparisons (the judge itself is unsure of it). The two runs also measure the judge's run-to-run
variation: if one run turns a verdict around with probability q, two runs disagree on about 2q
of the contexts, so q is estimated as (disagreements + 1/2) / (2 x contexts + 1) (the half keeps
a judge that never varied at the baseline from being taken for one that never can).

Each later round counts the stable contexts whose verdict moved. An unchanged judge moves each
with probability about q, so the count follows a binomial(stable, q); the round says "changed"
when the count passes the smallest number that an unchanged judge passes with probability at
most `false_alarm_rate`. A judge that changed (another model behind the same name, a new prompt)
turns many verdicts around at once, far more than its noise."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

Verdicts = Sequence[Sequence[bool]]  # per sample, per context


def binomial_tail(n: int, p: float, k: int) -> float:
    """P(X > k) for X ~ binomial(n, p)."""
    if k < 0:
        return 1.0
    if k >= n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    cdf = 0.0
    for i in range(k + 1):
        cdf += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p
                        + (n - i) * log_q)
    return max(0.0, 1.0 - cdf)


def allowed_moves(stable: int, noise_rate: float, false_alarm_rate: float) -> int:
    """The most stable contexts an unchanged judge moves in a round, but for `false_alarm_rate`."""
    k = 0
    while k < stable and binomial_tail(stable, noise_rate, k) > false_alarm_rate:
        k += 1
    return k


@dataclass(frozen=True, slots=True)
class Moved:
    """A context whose verdict differs from the baseline's."""

    sample: int
    context: int
    was: bool

    def to_dict(self) -> dict[str, object]:
        return {"sample": self.sample, "context": self.context, "was": self.was, "now": not self.was}


@dataclass(frozen=True, slots=True)
class CanaryRound:
    moved: list[Moved]
    stable: int
    allowed: int
    known_agreement: float | None  # share of contexts answered as the canary set says

    @property
    def changed(self) -> bool:
        return len(self.moved) > self.allowed

    def words(self) -> str:
        return (f"{len(self.moved)} of {self.stable} canary verdicts moved from the baseline "
                f"(its run-to-run variation allows {self.allowed})")


@dataclass(frozen=True, slots=True)
class CanaryBaseline:
    fingerprint: str
    verdicts: tuple[tuple[bool | None, ...], ...]  # per sample and context; None: unstable at the baseline
    contexts: int
    disagreements: int  # contexts the two baseline runs answered differently
    noise_rate: float  # the estimated chance that one run turns a verdict around
    allowed: int
    taken_at: float
    known_agreement: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def stable(self) -> int:
        return sum(1 for sample in self.verdicts for v in sample if v is not None)

    def compare(self, run: Verdicts, known: Verdicts | None = None) -> CanaryRound:
        moved = [Moved(s, c, was) for s, (base, now) in enumerate(zip(self.verdicts, run))
                 for c, (was, is_now) in enumerate(zip(base, now)) if was is not None and was != is_now]
        return CanaryRound(moved, self.stable, self.allowed, agreement(run, known))

    def to_dict(self) -> dict[str, object]:
        return {"fingerprint": self.fingerprint, "taken_at": round(self.taken_at, 3), "contexts": self.contexts,
                "stable": self.stable, "disagreements": self.disagreements,
                "noise_rate": round(self.noise_rate, 6), "allowed_moves": self.allowed,
                "known_agreement": None if self.known_agreement is None else round(self.known_agreement, 4)}


def agreement(run: Verdicts, known: Verdicts | None) -> float | None:
    if known is None:
        return None
    pairs = [(a, b) for got, want in zip(run, known) for a, b in zip(got, want)]
    return sum(1 for a, b in pairs if a == b) / len(pairs) if pairs else None


def take_baseline(first: Verdicts, second: Verdicts, *, fingerprint: str, false_alarm_rate: float,
                  taken_at: float, known: Verdicts | None = None) -> CanaryBaseline:
    verdicts = tuple(tuple(a if a == b else None for a, b in zip(x, y)) for x, y in zip(first, second))
    contexts = sum(len(sample) for sample in first)
    disagreements = sum(1 for sample in verdicts for v in sample if v is None)
    noise = (disagreements + 0.5) / (2 * contexts + 1)
    stable = contexts - disagreements
    return CanaryBaseline(fingerprint, verdicts, contexts, disagreements, noise,
                          allowed_moves(stable, noise, false_alarm_rate), taken_at, agreement(first, known))
