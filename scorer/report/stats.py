"""The figures the report shows, computed from score records. No HTML here."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from ctxprec.scorer.events import parse_rfc3339
from ctxprec.scorer.report.documents import DocumentFigures, TopKFigures, document_figures, top_k_figures
from ctxprec.scorer.report.drifts import ServiceDrifts, find_drifts

HISTOGRAM_BINS = 10
LOWEST_SHOWN = 10
FAILURE_EXAMPLES = 3
# Time buckets from fine to coarse; the first giving at most MAX_TIME_BUCKETS points is used.
BUCKET_SECONDS = (1, 10, 60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)
MAX_TIME_BUCKETS = 60


@dataclass
class TimePoint:
    start: float  # epoch seconds of the bucket start
    count: int
    mean: float  # normalised score 0..1


@dataclass
class RankRate:
    rank: int  # 1-based
    judged: int
    relevant: int

    @property
    def rate(self) -> float:
        return self.relevant / self.judged if self.judged else 0.0


@dataclass
class ServiceRow:
    service: str
    count: int
    scored: int
    mean: float | None
    p10: float | None
    hit_rate: float | None
    failures: int


@dataclass
class FailureGroup:
    kind: str
    count: int
    examples: list[str]


@dataclass
class ReportData:
    total: int = 0
    scored: int = 0
    failed: int = 0
    mean: float | None = None  # normalised 0..1
    scales: list[float] = field(default_factory=list)
    histogram: list[int] = field(default_factory=lambda: [0] * HISTOGRAM_BINS)
    time_series: list[TimePoint] = field(default_factory=list)
    time_bucket_s: int = 0
    time_source: str = ""  # "event timestamp" | "scored_at" | ""
    ranks: list[RankRate] = field(default_factory=list)
    services: list[ServiceRow] = field(default_factory=list)
    lowest: list[dict[str, Any]] = field(default_factory=list)
    failures: list[FailureGroup] = field(default_factory=list)
    documents: DocumentFigures = field(default_factory=DocumentFigures)
    top_k: TopKFigures = field(default_factory=TopKFigures)
    drifts: list[ServiceDrifts] = field(default_factory=list)


def normalised(record: dict[str, Any]) -> float:
    """The score on 0..1 whatever the scale it was made with (scale 0 scores are all 0)."""
    scale = record.get("scale", 1) or 0
    if not scale:
        return 0.0
    return min(1.0, max(0.0, float(record["score"]) / float(scale)))


def compute(records: Sequence[dict[str, Any]]) -> ReportData:
    data = ReportData(total=len(records))
    scored = [r for r in records if r.get("error") is None]
    failed = [r for r in records if r.get("error") is not None]
    data.scored, data.failed = len(scored), len(failed)
    data.scales = sorted({float(r.get("scale", 1)) for r in scored})
    values = [normalised(r) for r in scored]
    if values:
        data.mean = sum(values) / len(values)
    for value in values:
        data.histogram[min(int(value * HISTOGRAM_BINS), HISTOGRAM_BINS - 1)] += 1
    _time_series(data, scored)
    _ranks(data, scored)
    data.services = _services(records)
    data.lowest = sorted(scored, key=normalised)[:LOWEST_SHOWN]
    data.failures = _failures(failed)
    data.documents = document_figures(scored)
    data.top_k = top_k_figures(scored)
    data.drifts = find_drifts(scored, normalised)
    return data


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on pre-sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    position = (len(sorted_values) - 1) * q
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def record_time(record: dict[str, Any]) -> tuple[float | None, str]:
    """When the sample happened: the event's own timestamp when a record carries one (records from
    other producers may), else when it was scored."""
    for key, label in (("timestamp", "event timestamp"), ("scored_at", "scored_at")):
        value = record.get(key)
        if isinstance(value, str):
            moment = parse_rfc3339(value)
            if moment is not None:
                return moment, label
    return None, ""


def _time_series(data: ReportData, scored: Sequence[dict[str, Any]]) -> None:
    timed: list[tuple[float, float]] = []
    sources: set[str] = set()
    for record in scored:
        moment, source = record_time(record)
        if moment is not None:
            timed.append((moment, normalised(record)))
            sources.add(source)
    if not timed:
        return
    first = min(t for t, _ in timed)
    last = max(t for t, _ in timed)
    bucket = next((b for b in BUCKET_SECONDS if (last - first) / b < MAX_TIME_BUCKETS), BUCKET_SECONDS[-1])
    sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0])
    for moment, value in timed:
        slot = int((moment - first) // bucket)
        sums[slot][0] += value
        sums[slot][1] += 1
    data.time_bucket_s = bucket
    data.time_source = " and ".join(sorted(sources))
    data.time_series = [
        TimePoint(start=first + slot * bucket, count=int(n), mean=total / n) for slot, (total, n) in sorted(sums.items())
    ]


def _ranks(data: ReportData, scored: Sequence[dict[str, Any]]) -> None:
    judged: dict[int, int] = defaultdict(int)
    relevant: dict[int, int] = defaultdict(int)
    for record in scored:
        for verdict in record.get("verdicts") or []:
            rank = verdict["index"] + 1
            judged[rank] += 1
            if verdict["relevant"]:
                relevant[rank] += 1
    if not judged:
        return
    data.ranks = [RankRate(rank, judged.get(rank, 0), relevant.get(rank, 0)) for rank in range(1, max(judged) + 1)]


def _services(records: Sequence[dict[str, Any]]) -> list[ServiceRow]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        service = record.get("service")
        groups[service if isinstance(service, str) and service else "(none)"].append(record)
    rows = []
    for service, members in groups.items():
        ok = [r for r in members if r.get("error") is None]
        values = sorted(normalised(r) for r in ok)
        rows.append(
            ServiceRow(
                service=service,
                count=len(members),
                scored=len(ok),
                mean=sum(values) / len(values) if values else None,
                p10=percentile(values, 0.10) if values else None,
                hit_rate=sum(1 for r in ok if r.get("hit")) / len(ok) if ok else None,
                failures=len(members) - len(ok),
            )
        )
    rows.sort(key=lambda row: (-row.count, row.service))
    return rows


def _failures(failed: Sequence[dict[str, Any]]) -> list[FailureGroup]:
    groups: dict[str, FailureGroup] = {}
    for record in failed:
        error = record["error"]
        kind = error["type"]
        group = groups.setdefault(kind, FailureGroup(kind=kind, count=0, examples=[]))
        group.count += 1
        message = error.get("message")
        if isinstance(message, str) and len(group.examples) < FAILURE_EXAMPLES and message not in group.examples:
            group.examples.append(message)
    return sorted(groups.values(), key=lambda g: (-g.count, g.kind))
