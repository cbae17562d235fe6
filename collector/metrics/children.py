"""Cached label children of a Prometheus metric.

`metric.labels(...)` validates and joins its arguments and takes a lock on every call; on the
scoring path it ran about a dozen times per scored sample. Label values here are already
bounded (`LabelCap`, fixed sets), so a dict of the children stays small."""
from __future__ import annotations

from typing import Any


class Children:
    """`children(a, b)` is `metric.labels(a, b)`, looked up once per distinct label tuple."""

    __slots__ = ("_metric", "_cache")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._cache: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._cache.get(values)
        if child is None:
            child = self._cache[values] = self._metric.labels(*values)
        return child
