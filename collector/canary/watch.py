"""What a changed judge raises: `ctxprec_judge_changed` (1 until acknowledged or a new baseline is
taken), one WARNING naming what changed, and a note that every precision-drift alarm raised within
`change_window_s` of the change (before or after it) carries, in the log and on
`/diagnostics/drift`, so that an operator does not chase the retriever for the judge's fault."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from ctxprec.collector.metrics.registry import Metrics

log = logging.getLogger("ctxprec.judge")


@dataclass(frozen=True, slots=True)
class JudgeChange:
    at: float  # unix seconds
    what: str  # "fingerprint" | "answers"
    words: str  # the log line's text after "judge changed: "
    fingerprint_before: str
    fingerprint_after: str
    moved: int = 0
    allowed: int = 0
    moved_contexts: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"at": round(self.at, 3), "at_utc": _utc(self.at), "what": self.what, "message": self.words,
                "fingerprint_before": self.fingerprint_before, "fingerprint_after": self.fingerprint_after,
                "moved_contexts": self.moved, "allowed_moves": self.allowed,
                "moved": self.moved_contexts[:50]}


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class JudgeWatch:
    """The state the canary reports to and drift alarms read. `note(at)` is the words a drift
    alarm raised at `at` carries, or None when no judge change is within the window of it."""

    def __init__(self, metrics: Metrics | None, *, window_s: float, clock: Callable[[], float] = time.time,
                 on_new_fingerprint: Callable[[str, str], None] | None = None) -> None:
        self.metrics = metrics
        self.window_s = window_s
        self.clock = clock
        self.changed = False
        self.changes: list[JudgeChange] = []  # the last few, newest last
        self.acknowledged_at: float | None = None
        # Called with (before, after) when the judge's fingerprint changes: a new drift baseline.
        self.on_new_fingerprint = on_new_fingerprint
        if metrics is not None:
            metrics.judge_changed.set(0)

    @property
    def last(self) -> JudgeChange | None:
        return self.changes[-1] if self.changes else None

    def report(self, change: JudgeChange, *, alarmed_services: list[str] | None = None) -> None:
        self.changes = (self.changes + [change])[-10:]
        if change.what == "fingerprint":
            # The user changed model, prompt or settings: scores from now on are on another scale,
            # which is a new baseline for the drift detector, not a drift.
            if self.on_new_fingerprint is not None:
                self.on_new_fingerprint(change.fingerprint_before, change.fingerprint_after)
        self.changed = True
        if self.metrics is not None:
            self.metrics.judge_changed.set(1)
        tail = ""
        if alarmed_services:
            tail = (f"; the precision drift alarms of {', '.join(repr(s) for s in alarmed_services[:10])} are "
                    "within the window of this change and likely the judge's")
        log.warning("judge changed: %s%s", change.words, tail)

    def cleared(self, why: str) -> None:
        """Acknowledged, or a new baseline taken: `ctxprec_judge_changed` back to 0."""
        if self.changed:
            log.info("judge change cleared: %s", why)
        self.changed = False
        self.acknowledged_at = self.clock()
        if self.metrics is not None:
            self.metrics.judge_changed.set(0)

    def note(self, at: float) -> JudgeChange | None:
        """The judge change within the window of a drift alarm raised at `at`, if any."""
        for change in reversed(self.changes):
            if abs(at - change.at) <= self.window_s:
                return change
        return None

    def drift_words(self, at: float) -> str | None:
        change = self.note(at)
        if change is None:
            return None
        return f"judge changed at {_utc(change.at)} ({change.words}): the drift may be the judge's, not the retriever's"
