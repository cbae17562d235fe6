"""A one-line summary per minute of what the sidecar did, so that its log alone shows it working:
spans received, retrievals evaluated and failed, and the mean score of the services scored most
(the rest counted together); at DEBUG, one line per score with its reason. The same minute also
flushes the failure logs' counts (a failure kind is logged once, then counted per minute)."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Sequence

from ctxprec.collector.components import Deadline, cancelled
from ctxprec.collector.diagnostics.heavy_hitters import SpaceSaving
from ctxprec.collector.failure_log import Flushes
from ctxprec.collector.model import Decision, Outcome

log = logging.getLogger("ctxprec.activity")

# The line names the services with the most scores in the minute, and counts the rest: a line
# naming each of 17,000 services was 340,000 characters long. The services are counted in TRACKED
# Space-Saving slots, so that a flood of names costs no more memory and the busiest still show.
TOP_SERVICES = 10
TRACKED = 1000


class _Tally:
    __slots__ = ("total", "n")

    def __init__(self) -> None:
        self.total = 0.0
        self.n = 0


class ActivityLog:
    """A `ResultSink`; `tick()` (once a minute, while started) writes the line for the minute
    that ended, then the counts of each of `failure_logs()`."""

    def __init__(self, spans_received: Callable[[], float], logger: logging.Logger = log, *,
                 failure_logs: Callable[[], Sequence[Flushes]] = tuple, interval_s: float = 60.0) -> None:
        """`spans_received()` returns the total spans received so far (all receivers)."""
        self._spans_received = spans_received
        self._failure_logs = failure_logs
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._logger = logger
        self._spans_before = spans_received()
        self._evaluated = 0
        self._failed = 0
        self._other = 0
        self._scores: SpaceSaving[_Tally] = SpaceSaving(TRACKED, _Tally)  # by service, this minute
        self._score_sum = 0.0

    def emit(self, outcome: Outcome) -> None:
        if outcome.decision is Decision.EVALUATED and outcome.result is not None:
            self._evaluated += 1
            score = outcome.result.normalized_score
            self._score_sum += score
            tally = self._scores.increment(outcome.retrieval.service or "unknown").data
            tally.total += score
            tally.n += 1
            if self._logger.isEnabledFor(logging.DEBUG):  # one line per score: for dry runs, not production
                retrieval, result = outcome.retrieval, outcome.result
                self._logger.debug(
                    "scored %s %s (trace %s): %s against the %s; %s", retrieval.service or "unknown",
                    retrieval.retriever or "retrieval", retrieval.trace_id, result.score,
                    result.reference_kind.replace("_", " "), result.reason)
        elif outcome.decision is Decision.FAILED:
            self._failed += 1
        else:
            self._other += 1

    def tick(self) -> str:
        """Logs and returns the line for the minute that ended, then starts a new one."""
        spans = self._spans_received()
        received = int(spans - self._spans_before)
        self._spans_before = spans
        scores = self._scores
        shown = [(slot.key, slot.data) for slot in scores.top(TOP_SERVICES)]
        means = ", ".join(f"{service} {tally.total / tally.n:.2f}" for service, tally in shown)
        rest_n = self._evaluated - sum(tally.n for _, tally in shown)
        rest_sum = self._score_sum - sum(tally.total for _, tally in shown)
        rest_services = len(scores) - len(shown)
        if rest_n > 0:
            # With evictions, more services were seen than the slots hold: a lower bound.
            more = f"{rest_services:,}{'+' if scores.evictions else ''}"
            means += f" and {more} more services ({rest_n:,} scores, mean {rest_sum / rest_n:.2f})"
        line = (f"last minute: {received:,} spans received, {self._evaluated:,} retrievals evaluated, "
                f"{self._failed:,} failed, {self._other:,} decided without scoring"
                + (f"; mean score {means}" if means else ""))
        self._logger.info(line, extra={"fields": {
            "spans_received": received, "evaluated": self._evaluated, "failed": self._failed,
            "not_scored": self._other,
            "mean_score": {service: round(tally.total / tally.n, 4) for service, tally in shown},
            **({"other_services": rest_services, "other_scores": rest_n,
                "other_mean_score": round(rest_sum / rest_n, 4)} if rest_n > 0 else {})}})
        self._evaluated = self._failed = self._other = 0
        self._scores = SpaceSaving(TRACKED, _Tally)
        self._score_sum = 0.0
        return line

    # -- the minute --

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._every_minute(), name="ctxprec-minute")

    async def finish(self, deadline: Deadline) -> None:
        await cancelled(self._task)
        self._task = None
        self._flush_failures()  # what was counted since the last minute, not lost at the exit

    def _flush_failures(self) -> None:
        for failures in self._failure_logs():
            try:
                failures.flush()
            except Exception:  # the log lines must never stop the sidecar
                log.exception("writing the failure counts failed")

    async def close(self) -> None:
        return None

    async def _every_minute(self) -> None:
        last = time.monotonic()
        while True:
            # Short naps, so that a changed interval (tests) takes effect at once.
            await asyncio.sleep(min(1.0, self.interval_s))
            if time.monotonic() - last < self.interval_s:
                continue
            last = time.monotonic()
            try:
                self.tick()
            except Exception:  # the log lines must never stop the sidecar
                log.exception("writing the activity summary failed")
            self._flush_failures()
