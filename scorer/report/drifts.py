"""The drifts in a file of score records: the sidecar's drift detector (scorer/drift.py), with its
default settings, run over each service's scores in the order they happened, so that the report
tells a drift as the sidecar would have: the level before, the level since, the drop, and how the
alarm ended.

The order: by the events' own `timestamp` when every record of the service has one, else by input
line (`ctxprec score` records), else by when each was scored."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ctxprec.scorer.drift import Drift, DriftDetector, DriftEnd
from ctxprec.scorer.events import parse_rfc3339


@dataclass
class DriftRow:
    service: str
    started: str  # where the alarm rose: a time, or "line N"
    drift: Drift  # before, and the level since as of the end of the alarm (or of the records)
    ended: DriftEnd | None  # None: still alarmed at the last record
    ended_at: str | None


@dataclass
class ServiceDrifts:
    service: str
    scores: int
    warmup: int  # scores the detector learns its baseline from before it can alarm
    rows: list[DriftRow]
    order: str  # what the scores were put in order by


def find_drifts(scored: Sequence[dict[str, Any]], score_of: Callable[[dict[str, Any]], float]) -> list[ServiceDrifts]:
    by_service: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in scored:
        service = record.get("service")
        by_service[service if isinstance(service, str) and service else "(none)"].append(record)
    out = []
    for service, records in sorted(by_service.items()):
        ordered, order, where = _in_order(records)
        detector = DriftDetector()
        rows: list[DriftRow] = []
        current: DriftRow | None = None
        for record in ordered:
            was = detector.alarmed
            detector.update(score_of(record))
            if detector.alarmed and not was and detector.drift is not None:
                current = DriftRow(service, where(record), detector.drift, None, None)
                rows.append(current)
            elif was and not detector.alarmed and current is not None and detector.ended is not None:
                current.drift, current.ended, current.ended_at = detector.ended.drift, detector.ended, where(record)
                current = None
        if current is not None and detector.drift is not None:
            current.drift = detector.drift
        out.append(ServiceDrifts(service, len(ordered), detector.settings.warmup, rows, order))
    return out


def _in_order(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str,
                                                       Callable[[dict[str, Any]], str]]:
    times = [_time(r.get("timestamp")) for r in records]
    if all(t is not None for t in times):
        ordered = [r for _, r in sorted(zip(times, records), key=lambda pair: pair[0])]
        return ordered, "event timestamp", lambda r: str(r.get("timestamp"))
    if all(isinstance(r.get("line"), int) for r in records):
        return sorted(records, key=lambda r: r["line"]), "input line", lambda r: f"line {r['line']}"
    scored_at = [_time(r.get("scored_at")) or 0.0 for r in records]
    ordered = [r for _, r in sorted(zip(scored_at, records), key=lambda pair: pair[0])]
    return ordered, "scored_at", lambda r: str(r.get("scored_at"))


def _time(value: Any) -> float | None:
    return parse_rfc3339(value) if isinstance(value, str) else None
