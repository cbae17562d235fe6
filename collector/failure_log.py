"""Failures that come in bursts (a judge that is down, a backend that refuses), logged so that an
operator sees them at once without a line per failure: the first failure after a quiet minute is
a WARNING with its kind and detail; the ones after it are counted by kind and reported once a
minute (`flush`, called by the pipeline's minute tick) while they go on.

The libraries' own lines get the same treatment (`RepeatedLines`, a filter on the sidecar's log
handler): aiokafka logs an ERROR per reconnection attempt, 141 a second while a broker is
unreachable (about 69 MB of log an hour of outage)."""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Protocol


class Flushes(Protocol):
    """What the minute tick flushes: a FailureLog, RepeatedLines."""

    def flush(self) -> None: ...


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


@dataclass(slots=True)
class _Repeats:
    record: logging.LogRecord  # the last line of this cause
    count: int = 0  # lines not shown since the last report
    since: float = 0.0  # when the last report (or the first line) was written


class RepeatedLines(logging.Filter):
    """A filter for the sidecar's log handler that folds the warnings and errors other libraries
    repeat: the first line of a cause (its logger, level and message template, the arguments
    aside) after a quiet minute goes out as it is; the ones after it are counted, and once a
    minute while they go on one line says how many there were and shows the last. ctxprec's own
    lines, and the libraries' INFO lines, pass untouched (ctxprec's fold themselves, FailureLog).
    `flush` is the minute tick; a cause whose minute is over is also reported when its next line
    comes, so nothing waits for a tick that never comes."""

    # Causes tracked at once; past it a logger's lines of a level share one cause.
    MAX_CAUSES = 256

    def __init__(self, handler: logging.Handler, *, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.handler = handler
        self.interval_s = interval_s
        self._clock = clock
        self._causes: dict[tuple[str, int, str | None], _Repeats] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        if record.levelno < logging.WARNING or name == "ctxprec" or name.startswith("ctxprec.") \
                or getattr(record, "repeats", None) is not None:
            return True
        key: tuple[str, int, str | None] = (name, record.levelno, str(record.msg))
        now = self._clock()
        due: _Repeats | None = None
        with self._lock:
            if key not in self._causes and len(self._causes) >= self.MAX_CAUSES:
                key = (name, record.levelno, None)
            repeats = self._causes.get(key)
            if repeats is None:
                self._causes[key] = _Repeats(record, 0, now)
                return True
            repeats.record = record
            repeats.count += 1
            if now - repeats.since >= self.interval_s:
                due = _Repeats(record, repeats.count, repeats.since)
                repeats.count, repeats.since = 0, now
        if due is not None:
            self._report(due, now)
        return False

    def flush(self) -> None:
        """Reports the causes that repeated since their last report; forgets those that went quiet."""
        now = self._clock()
        with self._lock:
            due = [_Repeats(r.record, r.count, r.since) for r in self._causes.values() if r.count]
            for key, repeats in list(self._causes.items()):
                if repeats.count:
                    repeats.count, repeats.since = 0, now
                else:
                    del self._causes[key]
        for repeats in due:
            self._report(repeats, now)

    def _report(self, repeats: _Repeats, now: float) -> None:
        last = repeats.record
        try:
            text = last.getMessage()
        except Exception:  # a library's bad format string: its template, then
            text = str(last.msg)
        minutes = max(1, round((now - repeats.since) / 60.0))
        line = logging.LogRecord(
            last.name, last.levelno, last.pathname, last.lineno,
            "%d more like this in the last %s (the last: %s)",
            (repeats.count, "minute" if minutes == 1 else f"{minutes} minutes", text), None)
        line.repeats = repeats.count
        line.fields = {"repeated": repeats.count}
        self.handler.handle(line)
