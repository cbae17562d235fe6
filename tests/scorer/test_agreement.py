"""Agreement, Cohen's kappa and its interval, against values worked by hand."""
from __future__ import annotations

import math

import pytest

from ctxprec.scorer.agreement import Confusion


def _confusion(pairs: list[tuple[bool, bool]]) -> Confusion:
    c = Confusion()
    for judge, reference in pairs:
        c.add(judge, reference)
    return c


def test_kappa_matches_the_hand_computation() -> None:
    # 20 yes/yes, 5 judge-only, 10 reference-only, 15 no/no: po = 0.7; judge yes 0.5, reference
    # yes 0.6 -> pe = 0.3 + 0.2 = 0.5; kappa = 0.4; se = sqrt(0.21 / (50 * 0.25)) = 0.1296.
    c = _confusion([(True, True)] * 20 + [(True, False)] * 5 + [(False, True)] * 10 + [(False, False)] * 15)
    assert c.total == 50 and c.agreement == pytest.approx(0.7)
    assert c.kappa == pytest.approx(0.4)
    low, high = c.kappa_interval()
    se = math.sqrt(0.21 / 12.5)
    assert low == pytest.approx(0.4 - 1.96 * se, abs=1e-3) and high == pytest.approx(0.4 + 1.96 * se, abs=1e-3)
    assert c.precision == pytest.approx(20 / 25) and c.recall == pytest.approx(20 / 30)


def test_interval_narrows_with_more_labels() -> None:
    small = _confusion([(True, True)] * 8 + [(True, False)] * 2 + [(False, False)] * 8 + [(False, True)] * 2)
    big = Confusion()
    for _ in range(10):
        big.merge(small)
    assert small.kappa == pytest.approx(big.kappa)
    width = lambda c: c.kappa_interval()[1] - c.kappa_interval()[0]  # noqa: E731
    assert width(big) < width(small) / 3


def test_edge_cases_are_defined() -> None:
    empty = Confusion()
    assert empty.kappa is None and empty.kappa_interval() is None and empty.agreement is None
    assert empty.as_dict()["contexts"] == 0
    same = _confusion([(True, True)] * 10)  # one verdict throughout: chance explains everything
    assert same.kappa == 1.0 and same.kappa_interval() == (-1.0, 1.0)
    perfect = _confusion([(True, True)] * 30 + [(False, False)] * 30)
    low, high = perfect.kappa_interval()
    assert perfect.kappa == 1.0 and high == 1.0 and 0.8 < low < 1.0
    opposite = _confusion([(True, False)] * 10 + [(False, True)] * 10)
    assert opposite.kappa == pytest.approx(-1.0) and opposite.precision == 0.0
