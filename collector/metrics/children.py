"""Label children of a Prometheus metric family, and the one budget on how many series a family
may have.

`metric.labels(...)` validates and joins its arguments and takes a lock on every call; on the
scoring path it ran about a dozen times per scored sample, so `Children` looks each label tuple up
once.

The open labels (`service`, `retriever`: names that come from the traffic) are each capped
(`LabelCap`: the first N values, then `other`), but the caps multiply: 50 services x 50
retrievers x a histogram's 13 series made a scrape of nearly 100,000 series and 9 MB, which is
where Prometheus setups fall over. So every family has one budget of series
(`SeriesBudget.max_series`, the `metrics.max_series_per_metric` setting): a label tuple that would
take the family past it is stored with its open labels as `other` (its fixed labels kept: a
decision, a rank), and counted. What a child costs is what the family exposes per label tuple: a
histogram's buckets, sum and count, a counter's total, a gauge's value. The same budget bounds data
kept per (service, retriever) elsewhere (the diagnostics), through `SeriesBudget.family`."""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable

log = logging.getLogger(__name__)

OTHER = "other"
# Labels whose values come from the traffic; every other label takes values from a fixed set.
OPEN_LABELS = frozenset({"service", "retriever"})


class LabelCap:
    """Caps one open label's values: the first `limit` distinct values pass, later ones are `other`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str | None) -> str:
        value = value or "unknown"
        if value in self._seen:
            return value
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) < self.limit:
                self._seen.add(value)
                return value
        return OTHER


class FamilyBudget:
    """The series one family may hold: label tuples are admitted while they fit, then folded."""

    __slots__ = ("name", "max_series", "series_per_child", "_open", "_admitted", "_folded")

    def __init__(self, name: str, max_series: int, open_positions: Iterable[int], series_per_child: int | None,
                 folded: Callable[[str], None]) -> None:
        self.name = name
        self.max_series = max_series
        self.series_per_child = series_per_child  # None until the family's first child says
        self._open = tuple(open_positions)
        self._admitted: set[tuple[str, ...]] = set()
        self._folded = folded

    @property
    def series(self) -> int:
        return len(self._admitted) * (self.series_per_child or 1)

    def admit(self, values: tuple[str, ...]) -> tuple[str, ...]:
        """`values`, or the tuple they are counted under once the family is full."""
        if not self._open or values in self._admitted:
            return values
        folded = tuple(OTHER if i in self._open else v for i, v in enumerate(values))
        if folded == values:  # already `other`: the place overflow goes, never refused
            self._admitted.add(values)
            return values
        if (len(self._admitted) + 1) * (self.series_per_child or 1) <= self.max_series:
            self._admitted.add(values)
            return values
        self._folded(self.name)
        self._admitted.add(folded)
        return folded


class SeriesBudget:
    """One budget for every family of a registry: `max_series` each, folds counted by `folded`
    (called with the family's name)."""

    def __init__(self, max_series: int, folded: Callable[[str], None] | None = None) -> None:
        self.max_series = max_series
        self._count = folded or (lambda name: None)
        self._families: dict[str, FamilyBudget] = {}
        self._warned = False

    def _folded(self, name: str) -> None:
        if not self._warned:  # once: the families fill together, from the same traffic
            self._warned = True
            log.warning("%s reached its budget of %d series (--max-series-per-metric); new service and retriever "
                        "values are counted under '%s' there and in every family that fills "
                        "(ctxprec_metric_series_folded_total)", name, self.max_series, OTHER)
        self._count(name)

    def family(self, name: str, labelnames: Iterable[str], series_per_child: int | None = None) -> FamilyBudget:
        """The budget of the family `name` (one per name, shared by every user of it)."""
        budget = self._families.get(name)
        if budget is None:
            positions = [i for i, label in enumerate(labelnames) if label in OPEN_LABELS]
            budget = self._families[name] = FamilyBudget(name, self.max_series, positions, series_per_child,
                                                         self._folded)
        return budget

    def of(self, metric: Any) -> FamilyBudget:
        # prometheus_client keeps a family's name and label names in these attributes.
        budget = self._families.get(metric._name)
        if budget is None:
            budget = self.family(metric._name, metric._labelnames, _series_per_child(metric))
        return budget


class Children:
    """`children(a, b)` is `metric.labels(a, b)`, looked up once per distinct label tuple, within
    the family's budget when one is given."""

    __slots__ = ("_metric", "_cache", "_budget")

    def __init__(self, metric: Any, budget: SeriesBudget | None = None) -> None:
        self._metric = metric
        self._cache: dict[tuple[str, ...], Any] = {}
        self._budget = budget.of(metric) if budget is not None else None

    def __call__(self, *values: str) -> Any:
        child = self._cache.get(values)
        if child is not None:
            return child
        budget = self._budget
        if budget is None:
            child = self._cache[values] = self._metric.labels(*values)
            return child
        kept = budget.admit(values)
        child = self._cache.get(kept)
        if child is None:
            child = self._cache[kept] = self._metric.labels(*kept)
        # A folded tuple is not kept under its own values: those are what cannot be bounded.
        return child


def _series_per_child(metric: Any) -> int:
    """How many series one child of `metric` exposes (a histogram's buckets, _sum and _count),
    counted on a child made for the purpose and removed again."""
    probe = tuple(f"\x00series-probe-{i}" for i in range(len(metric._labelnames)))
    if not probe:
        return 1
    metric.labels(*probe)
    try:
        return max(1, sum(1 for family in metric.collect() for sample in family.samples
                          if sample.labels.get(metric._labelnames[0]) == probe[0]))
    finally:
        metric.remove(*probe)
