"""Failures that come in bursts (a judge that is down, a backend that refuses), logged so that an
operator sees them at once without a line per failure: the first failure after a quiet minute is
a WARNING with its kind and detail; the ones after it are counted by kind and reported once a
minute (`flush`, called by the pipeline's minute tick) while they go on."""
from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Callable


class FailureLog:
    def __init__(self, what: str, logger: logging.Logger, *, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`what` names the failing part in every line ("judge openai/gpt-4o-mini")."""
        self.what = what
        self.logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._last_warning = float("-inf")
        self._pending: Counter[str] = Counter()
        self.total = 0

    def failed(self, kind: str, detail: str = "") -> None:
        self.total += 1
        now = self._clock()
        if now - self._last_warning >= self.interval_s and not self._pending:
            self._last_warning = now
            self.logger.warning("%s: %s%s", self.what, kind, f" ({detail})" if detail else "",
                                extra={"fields": {"component": self.what, "error_kind": kind}})
            return
        self._pending[kind] += 1

    def flush(self) -> None:
        """Reports the failures counted since the last line, if any."""
        if not self._pending:
            return
        count = sum(self._pending.values())
        kinds = ", ".join(f"{kind} {n}" for kind, n in self._pending.most_common())
        self.logger.warning("%s: %d more failure%s in the last minute (%s)", self.what, count,
                            "s" if count != 1 else "", kinds,
                            extra={"fields": {"component": self.what, "failures": dict(self._pending)}})
        self._pending.clear()
        self._last_warning = self._clock()
