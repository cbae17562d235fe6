"""How far two sets of relevance verdicts agree: the judge against people, or a candidate judge
against the live one. Counted per context (one retrieved context = one yes/no verdict each side).

Cohen's kappa corrects raw agreement for the agreement two raters would reach by chance given how
often each says "relevant"; its 95% interval uses the large-sample standard error
sqrt(po (1 - po) / (n (1 - pe)^2)), which is what makes a kappa from 30 labels read as the guess
it is. Precision and recall are those of the judge's "relevant" against the reference's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Z95 = 1.959963984540054


@dataclass(slots=True)
class Confusion:
    """Counts of (judge, reference) verdict pairs; the reference is people or the live judge."""

    both_relevant: int = 0  # judge yes, reference yes
    judge_only: int = 0  # judge yes, reference no (a false positive of the judge)
    reference_only: int = 0  # judge no, reference yes (a false negative)
    both_irrelevant: int = 0

    def add(self, judge: bool, reference: bool) -> None:
        if judge and reference:
            self.both_relevant += 1
        elif judge:
            self.judge_only += 1
        elif reference:
            self.reference_only += 1
        else:
            self.both_irrelevant += 1

    def merge(self, other: Confusion) -> None:
        self.both_relevant += other.both_relevant
        self.judge_only += other.judge_only
        self.reference_only += other.reference_only
        self.both_irrelevant += other.both_irrelevant

    @property
    def total(self) -> int:
        return self.both_relevant + self.judge_only + self.reference_only + self.both_irrelevant

    @property
    def agreement(self) -> float | None:
        n = self.total
        return (self.both_relevant + self.both_irrelevant) / n if n else None

    def _chance(self) -> float:
        n = self.total
        judge_yes = (self.both_relevant + self.judge_only) / n
        reference_yes = (self.both_relevant + self.reference_only) / n
        return judge_yes * reference_yes + (1 - judge_yes) * (1 - reference_yes)

    @property
    def kappa(self) -> float | None:
        """None with no pairs; 1.0 when chance agreement is 1 (both sides gave one same verdict
        throughout), where the formula is 0/0."""
        n = self.total
        if not n:
            return None
        po, pe = self.agreement or 0.0, self._chance()
        if pe >= 1.0:
            return 1.0 if po >= 1.0 else 0.0
        return (po - pe) / (1 - pe)

    def kappa_interval(self, z: float = Z95) -> tuple[float, float] | None:
        kappa = self.kappa
        n = self.total
        if kappa is None:
            return None
        po, pe = self.agreement or 0.0, self._chance()
        if pe >= 1.0:
            # Every verdict the same on both sides: the data cannot tell agreement from chance.
            return (-1.0, 1.0)
        if po >= 1.0:
            # Perfect agreement on n pairs: the normal approximation has no width; the rule of
            # three bounds the disagreement rate by 3/n (95%), which bounds kappa from below.
            worst = max(0.0, 1.0 - 3.0 / n)
            return (max(-1.0, (worst - pe) / (1 - pe)), 1.0)
        se = math.sqrt(po * (1 - po) / (n * (1 - pe) ** 2))
        return (max(-1.0, kappa - z * se), min(1.0, kappa + z * se))

    @property
    def precision(self) -> float | None:
        said = self.both_relevant + self.judge_only
        return self.both_relevant / said if said else None

    @property
    def recall(self) -> float | None:
        relevant = self.both_relevant + self.reference_only
        return self.both_relevant / relevant if relevant else None

    def as_dict(self) -> dict[str, Any]:
        interval = self.kappa_interval()
        return {
            "contexts": self.total,
            "agreement": _round(self.agreement),
            "kappa": _round(self.kappa),
            "kappa_interval_95": [round(interval[0], 4), round(interval[1], 4)] if interval else None,
            "precision": _round(self.precision),
            "recall": _round(self.recall),
            "confusion": {"both_relevant": self.both_relevant, "judge_only": self.judge_only,
                          "reference_only": self.reference_only, "both_irrelevant": self.both_irrelevant},
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
