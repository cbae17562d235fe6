"""The demo's live terminal view: what the sidecar measured, per service, redrawn every second.

`Tally` is a result sink that keeps the recent scores; `render` turns a `Snapshot` into text (a
redrawn screen on a terminal, one plain block per refresh otherwise)."""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from ctxprec.collector.model import Decision, Outcome
from ctxprec.scorer.drift import Drift

WINDOW_S = 5.0


@dataclass(slots=True)
class ServiceTally:
    scores: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=5000))  # (monotonic, score)
    scored: int = 0
    failed: int = 0
    by_phase: dict[bool, list[float]] = field(default_factory=lambda: {False: [], True: []})  # degraded? -> scores


class Tally:
    """A `ResultSink`: keeps each service's recent scores, split by whether the trace was sent
    while the retriever was degraded (`degraded_traces` is filled by the app's `on_emit`)."""

    def __init__(self) -> None:
        self.services: dict[str, ServiceTally] = {}
        self.degraded_traces: set[str] = set()

    def emit(self, outcome: Outcome) -> None:
        if not outcome.scored:  # decided without the judge (throttled, duplicate, ...)
            return
        r = outcome.retrieval
        tally = self.services.setdefault(r.service, ServiceTally())
        if outcome.decision is not Decision.EVALUATED or outcome.result is None:
            tally.failed += 1
            return
        score = outcome.result.normalized_score
        tally.scored += 1
        tally.scores.append((time.monotonic(), score))
        tally.by_phase[r.trace_id in self.degraded_traces].append(score)

    def window_mean(self, service: str, now: float, window_s: float = WINDOW_S) -> float | None:
        tally = self.services.get(service)
        if tally is None:
            return None
        recent = [s for t, s in tally.scores if now - t <= window_s]
        return sum(recent) / len(recent) if recent else None

    def phase_mean(self, service: str, degraded: bool) -> float | None:
        tally = self.services.get(service)
        values = tally.by_phase[degraded] if tally else []
        return sum(values) / len(values) if values else None


@dataclass(slots=True)
class ServiceRow:
    service: str
    sent: int
    scored: int
    failed: int
    window: float | None  # mean precision over the last WINDOW_S seconds
    recent: float | None  # drift detector's recent level (the mean since the drift while alarmed)
    baseline: float | None  # drift detector's baseline (None while warming up; before the drift while alarmed)
    drift: Drift | None  # while the detector is alarmed: before, after and the change, as printed everywhere
    rate: float | None = None  # sample rate in force (raised while a drift is suspected)
    base_rate: float | None = None  # the configured rate
    adapted: bool = False  # the detector's baseline moved to a new level after a drift


def rate_text(rate: float | None) -> str:
    if rate is None:
        return "--"
    return f"{rate:.0%}" if rate >= 0.01 else f"{rate:.1%}"


@dataclass(slots=True)
class Snapshot:
    elapsed: float
    duration: float | None
    metrics_url: str
    degrade_service: str
    degrade_after: float | None
    degraded_at: float | None
    rows: list[ServiceRow]
    decisions: dict[str, int]
    events: list[str]
    diagnostics: list[str] = field(default_factory=list)  # noisy documents, recommended top-k
    show_diagnostics: bool = True  # the plain view prints them now and then, not every second


def _f(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "  --"


def render(snap: Snapshot, *, tty: bool) -> str:
    total = f"/{snap.duration:.0f}s (Ctrl-C ends it early)" if snap.duration else "s (Ctrl-C to stop)"
    if snap.degraded_at is not None:
        phase = f"{snap.degrade_service}'s retriever DEGRADED at {snap.degraded_at:.1f}s"
    elif snap.degrade_after is not None:
        phase = f"{snap.degrade_service}'s retriever degrades at {snap.degrade_after:.0f}s"
    else:
        phase = "retriever healthy"
    decisions = " ".join(f"{k}={v}" for k, v in sorted(snap.decisions.items())) or "none yet"
    if not tty:
        lines = [f"[{snap.elapsed:5.1f}s] {phase}; decisions: {decisions}"]
        for r in snap.rows:
            lines.append(f"[{snap.elapsed:5.1f}s]   {r.service:<12} sent {r.sent:>5} scored {r.scored:>5} "
                         f"rate {rate_text(r.rate):>4} precision({WINDOW_S:.0f}s) {_f(r.window)} "
                         f"recent {_f(r.recent)} baseline {_f(r.baseline)} drift {_state(r, color=False)}")
        if snap.show_diagnostics:
            lines += [f"[{snap.elapsed:5.1f}s]   {line}" for line in snap.diagnostics]
        return "\n".join(lines)
    header = (f"{'service':<14}{'sent':>7}{'scored':>8}{'failed':>8}{'rate':>6}{'prec ' + str(int(WINDOW_S)) + 's':>9}"
              f"{'recent':>8}{'baseline':>10}  drift")
    lines = [
        f"ctxprec demo  {snap.elapsed:5.1f}{total}   judge: local   metrics: {snap.metrics_url}/metrics",
        phase,
        "",
        header,
        "-" * len(header),
    ]
    for r in snap.rows:
        rate = rate_text(r.rate)
        if r.rate is not None and r.base_rate is not None and r.rate > r.base_rate:
            rate = f"\x1b[1;33m{rate:>6}\x1b[0m"  # raised: drift suspected
        lines.append(f"{r.service:<14}{r.sent:>7}{r.scored:>8}{r.failed:>8}{rate:>6}{_f(r.window):>9}"
                     f"{_f(r.recent):>8}{_f(r.baseline):>10}  {_state(r, color=True)}")
    lines += ["", f"decisions: {decisions}", ""]
    lines += snap.diagnostics + ([""] if snap.diagnostics else [])
    lines += snap.events[-8:]
    return "\x1b[H\x1b[J" + "\n".join(lines)


def _state(row: ServiceRow, *, color: bool) -> str:
    if row.drift is not None:
        change = f"({row.drift.direction} {abs(row.drift.change):.2f})"
        return f"\x1b[1;31mDRIFT\x1b[0m {change}" if color else f"DRIFT {change}"
    if row.adapted:  # not "stable": precision did not come back, the baseline moved to it
        return "\x1b[33madapted\x1b[0m" if color else "adapted"
    return "\x1b[32mstable\x1b[0m" if color else "no"
