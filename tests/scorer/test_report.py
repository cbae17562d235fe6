"""`ctxprec report`: the HTML renders, is self-contained, and shows the figures of its input."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from ctxprec.collector.cli import main
from ctxprec.scorer.records import failure_record, record_id, score_record
from ctxprec.scorer.result import JudgeUsage, ScoreResult, Verdict

START = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


class Page(HTMLParser):
    """Collects what the tests look at: sections, their SVG shapes, table cells, text."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict[str, Any]] = {}
        self.tags: list[str] = []
        self.external: list[str] = []
        self._section: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._in_title = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        for key in ("src", "href"):
            if a.get(key):
                self.external.append(a[key] or "")
        if tag == "section":
            self._section = a.get("id")
            self.sections[self._section or ""] = {"svg": 0, "bars": [], "points": [], "rows": [], "text": [], "hint": None}
        current = self.sections.get(self._section or "") if self._section else None
        if current is None:
            return
        if tag == "svg":
            current["svg"] += 1
        elif tag == "rect" and a.get("class") == "bar":
            current["bars"].append((a.get("data-label"), float(a["data-value"] or 0)))
        elif tag == "circle" and a.get("class") == "point":
            current["points"].append(float(a["data-value"] or 0))
        elif tag == "tr":
            self._row = []
        elif tag == "td":
            self._cell = []
        elif tag == "title":
            self._in_title += 1
        elif tag == "p" and a.get("id") == "top-k-hint":
            current["hint"] = True

    def handle_endtag(self, tag: str) -> None:
        current = self.sections.get(self._section or "") if self._section else None
        if tag == "section":
            self._section = None
        elif current is None:
            return
        elif tag == "td" and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row:
                current["rows"].append(self._row)
            self._row = None
        elif tag == "title":
            self._in_title -= 1

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._section and not self._in_title:
            self.sections[self._section]["text"].append(data)

    def text(self, section: str) -> str:
        return " ".join(" ".join(self.sections[section]["text"]).split())


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


def scored(
    i: int, service: str, relevance: list[bool], *, scale: float = 1, when: datetime | None = None
) -> dict[str, Any]:
    """A record as the scorer would write it, with its score from the given verdicts."""
    so_far, total = 0, 0.0
    for pos, rel in enumerate(relevance):
        if rel:
            so_far += 1
            total += so_far / (pos + 1)
    score = round((total / so_far if so_far else 0.0) * scale, 2)
    result = ScoreResult(
        score=score,
        reason=f"The score is {score} because sample {i} ...",
        verdicts=[Verdict(j, rel, f"verdict {j}") for j, rel in enumerate(relevance)],
        precision_at_k=sum(relevance) / len(relevance),
        hit=any(relevance),
        first_relevant_rank=(relevance.index(True) + 1) if any(relevance) else None,
        relevant_count=sum(relevance),
        k=len(relevance),
        scale=scale,
        reference_kind="output",
        usage=JudgeUsage(model="openai/x", prompt_version="pv"),
    )
    return score_record(
        result,
        record_id=record_id(f"{i:032x}", f"{i:016x}", "fp"),
        trace_id=f"{i:032x}",
        span_id=f"{i:016x}",
        service=service,
        retriever="kb",
        scored_at=when or START + timedelta(minutes=i),
    )


def failed(i: int, service: str, kind: str, message: str) -> dict[str, Any]:
    return failure_record(
        error_type=kind, message=message, record_id=str(i), trace_id=f"{i:032x}", service=service,
        scored_at=START + timedelta(minutes=i),
    )


def write_jsonl(path: Path, items: list[Any]) -> Path:
    path.write_text("".join((item if isinstance(item, str) else json.dumps(item)) + "\n" for item in items), encoding="utf-8")
    return path


def render(tmp_path: Path, items: list[Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, Page, str, str]:
    source = write_jsonl(tmp_path / "scores.jsonl", items)
    target = tmp_path / "report.html"
    rc = main(["report", str(source), "-o", str(target)])
    err = capsys.readouterr().err
    html = target.read_text(encoding="utf-8") if target.exists() else ""
    return rc, parse(html), html, err


def test_report_sections_show_the_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(5)
    records: list[dict[str, Any]] = []
    patterns: list[list[bool]] = []
    for i in range(60):
        service = ("search", "support", "billing")[i % 3]
        # Relevance concentrated at the top ranks: ranks 4-6 are rarely relevant.
        pattern = [rng.random() < p for p in (0.9, 0.7, 0.5, 0.05, 0.0, 0.0)]
        patterns.append(pattern)
        records.append(scored(i, service, pattern))
    records.append(failed(100, "support", "timeout", "line 101: judge timed out after 30s"))
    records.append(failed(101, "support", "timeout", "line 102: judge timed out after 30s"))
    records.append(failed(102, "billing", "bad_input", "line 103: missing required field 'query'"))

    rc, page, html, err = render(tmp_path, records, capsys)
    assert rc == 0, err

    for section in ("summary", "distribution", "over-time", "rank-relevance", "services", "lowest", "failures"):
        assert section in page.sections, section
    # Self-contained: no script, no external resource.
    assert "script" not in page.tags and page.external == []
    assert "<svg" in html and page.sections["distribution"]["svg"] == 1

    ok = [r for r in records if r["error"] is None]
    summary = page.text("summary")
    assert f"{len(records)} records" in summary and "60 scored" in summary and "3 failed" in summary
    mean = sum(r["score"] for r in ok) / len(ok)
    assert f"{mean:.3f}" in summary

    # Histogram: one bar per tenth, counts as in the input.
    bars = page.sections["distribution"]["bars"]
    assert len(bars) == 10
    expected = [0] * 10
    for r in ok:
        expected[min(int(r["score"] * 10), 9)] += 1
    assert [int(v) for _, v in bars] == expected

    # Relevance rate by rank: one bar per rank, fraction relevant.
    rank_bars = page.sections["rank-relevance"]["bars"]
    assert [label for label, _ in rank_bars] == ["1", "2", "3", "4", "5", "6"]
    for rank, (_, value) in enumerate(rank_bars):
        assert value == pytest.approx(sum(p[rank] for p in patterns) / len(patterns), abs=1e-4)
    assert page.sections["rank-relevance"]["hint"], "relevance falls off after rank 3: a top-k hint is shown"
    # One top-k rule: the rank section gives the recommendation "The right top-k" gives, in its words.
    assert "the recommended top-k is 3 (the smallest k that keeps at least 95% of the relevant contexts" in \
        page.text("rank-relevance")
    assert "Recommended top-k: 3" in page.text("top-k")

    # Score over time: the 60 minutes of scored_at fall in buckets whose means are the input's.
    points = page.sections["over-time"]["points"]
    assert points and len(points) <= 60
    weighted = sum(points) / len(points)
    assert 0 <= min(points) and max(points) <= 1 and weighted == pytest.approx(mean, abs=0.2)

    # Per-service table: count, mean, p10, hit rate, failures.
    rows = {row[0]: row for row in page.sections["services"]["rows"]}
    assert set(rows) == {"search", "support", "billing"}
    support = [r for r in records if r["service"] == "support"]
    support_ok = sorted(r["score"] for r in support if r["error"] is None)
    assert rows["support"][1] == str(len(support))
    assert rows["support"][2] == f"{sum(support_ok) / len(support_ok):.3f}"
    position = (len(support_ok) - 1) * 0.1
    low = int(position)
    p10 = support_ok[low] + (support_ok[low + 1] - support_ok[low]) * (position - low)
    assert rows["support"][3] == f"{p10:.3f}"
    hits = sum(1 for r in support if r["error"] is None and r["hit"])
    assert rows["support"][4] == f"{hits / len(support_ok) * 100:.1f}%"
    assert rows["support"][5] == "2" and rows["billing"][5] == "1" and rows["search"][5] == "0"

    # Lowest scores first, with their reasons.
    lowest = page.sections["lowest"]["rows"]
    assert len(lowest) == 10
    shown = [float(row[0]) for row in lowest]
    assert shown == sorted(r["score"] for r in ok)[:10]
    assert all(row[6].startswith("The score is") for row in lowest)

    # Failures grouped by type, with an example message.
    failures = {row[0]: row for row in page.sections["failures"]["rows"]}
    assert failures["timeout"][1] == "2" and "judge timed out" in failures["timeout"][2]
    assert failures["bad_input"][1] == "1" and "missing required field 'query'" in failures["bad_input"][2]
    assert "problems" not in page.sections


def test_scaled_scores_are_charted_on_zero_to_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [scored(i, "svc", [True, False] if i % 2 else [False, True], scale=10) for i in range(10)]
    rc, page, _, _ = render(tmp_path, records, capsys)
    assert rc == 0
    # Scores 10 and 5 on scale 10 land in the last and the middle bins.
    values = [v for _, v in page.sections["distribution"]["bars"]]
    assert values[9] == 5 and values[5] == 5


def test_event_timestamp_wins_over_scored_at(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = []
    for day in range(5):
        r = scored(day, "svc", [True] if day % 2 else [False, True])
        r["timestamp"] = (START - timedelta(days=day)).isoformat().replace("+00:00", "Z")
        records.append(r)
    rc, page, _, _ = render(tmp_path, records, capsys)
    assert rc == 0
    assert len(page.sections["over-time"]["points"]) == 5
    assert "event timestamp" in page.text("over-time")


def test_bad_lines_are_listed_and_the_rest_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items: list[Any] = [
        scored(1, "svc", [True]),
        "{broken",
        {"query": "q", "contexts": ["a"]},
        scored(2, "svc", [False, True]),
        {"score": "high", "error": None, "scored_at": "x"},
    ]
    rc, page, _, err = render(tmp_path, items, capsys)
    assert rc == 0
    problems = page.text("problems")
    assert "3 line(s)" in problems
    assert "line 2: not valid JSON" in problems
    assert "line 3: this is a RAG event, not a score record" in problems
    assert "line 5: 'score' must be a number" in problems
    assert "2 scored" in page.text("summary")
    assert "skipped 3 line(s)" in err and "line 2" in err


def test_empty_input_says_so_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, page, _, err = render(tmp_path, [], capsys)
    assert rc == 1
    assert "No score records found" in page.text("empty")
    assert "distribution" not in page.sections
    assert "ctxprec report: error: no score records in" in err and "the file is empty" in err


def test_events_instead_of_scores_exit_1_naming_the_mistake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, page, _, err = render(tmp_path, [{"query": "q", "contexts": ["a"]}, "", {"query": "r", "contexts": []}], capsys)
    assert rc == 1
    assert "line 1: this is a RAG event, not a score record" in err
    assert "no score records in" in err and "3 line(s) read" in err
    assert "No score records found" in page.text("empty")


def test_missing_input_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "r.html")]) == 2
    assert "nope.jsonl: no such file" in capsys.readouterr().err
    assert main(["report", str(write_jsonl(tmp_path / "s.jsonl", []))]) == 2  # -o is required
    assert "-o/--output" in capsys.readouterr().err


def test_report_through_the_console_script(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "scores.jsonl", [scored(i, "svc", [True, False, True]) for i in range(3)])
    target = tmp_path / "out.html"
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ctxprec")), "report", str(source), "-o", str(target)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    page = parse(target.read_text(encoding="utf-8"))
    assert "3 records" in page.text("summary")


def test_time_axis_spans_the_events_timestamps(tmp_path: Path) -> None:
    """Events from five days, scored in one run through the console scripts: the chart runs from
    the first day to the last, not over the second in which they were scored."""
    # Long before any clock this runs on, so that scored_at can never fall among them.
    days = [datetime(2024, 3, 1, tzinfo=timezone.utc) + timedelta(days=d) for d in range(5)]
    events = [
        {"query": f"How long do reset links last? ({i})", "contexts": ["Reset links expire after one hour.", "Office hours."],
         "output": "They expire after one hour.", "timestamp": day.isoformat().replace("+00:00", "Z")}
        for i, day in enumerate(days)
    ]
    source = write_jsonl(tmp_path / "events.jsonl", events)
    scores, target = tmp_path / "scores.jsonl", tmp_path / "report.html"
    script = str(Path(sys.executable).with_name("ctxprec"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPREC_")}
    for argv in (["score", str(source), "-o", str(scores)], ["report", str(scores), "-o", str(target)]):
        done = subprocess.run([script, *argv], capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr

    records = [json.loads(line) for line in scores.read_text(encoding="utf-8").splitlines()]
    assert [r["timestamp"] for r in records] == [e["timestamp"] for e in events]
    page = parse(target.read_text(encoding="utf-8"))
    over_time = page.text("over-time")
    points = page.sections["over-time"]["points"]
    assert len(points) == len(days)  # one bucket per day, not one dot for the whole run
    first, last = (d.strftime("%Y-%m-%d %H:%M:%S UTC") for d in (days[0], days[-1]))
    assert first in over_time and last in over_time  # the axis labels are the events' first and last times
    assert "event timestamp" in over_time
    scored_on = records[0]["scored_at"][:10]
    assert all(scored_on not in label for label in (first, last))
