"""The report as a person sees it: events scored by the real `ctxprec score`, the page drawn by
`ctxprec report` and rendered by headless Chromium (Debian's package), its tables read back from
the rendered DOM. The worst samples can be found (question, line, id), a document without an id
shows its first words beside its hash, the rank section and "The right top-k" give the same k, and
the drift in the middle of the file is told with the levels the scores have."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scorer.test_report import Page, parse

pytestmark = pytest.mark.slow

CTXPREC = [sys.executable, "-m", "ctxprec.collector.cli"]
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")
TOPICS = (
    ("How do I reset my password?", "Open Settings > Security and choose Reset password.",
     "To reset your password, open Settings > Security and choose Reset password."),
    ("How long do refunds take?", "Refunds reach your card within 5 business days.",
     "Refunds are sent back to your card within 5 business days."),
    ("Can I export invoices as PDF?", "Yes, invoices export as PDF from the Billing page.",
     "The Billing page exports every invoice as a PDF file."),
)
NEWSLETTER = {"content": "Our newsletter comes out every month with product news.", "id": "newsletter"}
COOKIES = "Cookies help us remember your preferences on this site."
CAREERS = {"content": "We are hiring engineers in Lisbon and Berlin.", "id": "careers"}
HEALTHY, DEGRADED = 150, 150
BAD_LINE = 41  # a misspelt `contexs`


def events() -> list[str]:
    """A support bot whose retriever puts the answer first, then (from event 151 on) third; its
    fourth context is never relevant."""
    out = []
    for i in range(HEALTHY + DEGRADED):
        question, answer, relevant = TOPICS[i % len(TOPICS)]
        contexts = [relevant, NEWSLETTER, COOKIES, CAREERS] if i < HEALTHY else [NEWSLETTER, COOKIES, relevant, CAREERS]
        out.append(json.dumps({"id": f"q-{i + 1}", "service": "support-bot", "query": question, "output": answer,
                               "contexts": contexts}))
    out.insert(BAD_LINE - 1, json.dumps({"query": "Where is the office?", "contexs": ["In Paris."]}))
    return out


def rendered(html_path: Path, profile: Path) -> str:
    chromium = shutil.which("chromium")
    assert chromium, "make test installs Debian's chromium (tests/install-system-deps.sh)"
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                           html_path.as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_report_as_chromium_renders_it(tmp_path: Path) -> None:
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join(events()) + "\n")
    scores, report = tmp_path / "scores.jsonl", tmp_path / "report.html"
    scored = subprocess.run([*CTXPREC, "score", str(source), "-o", str(scores)], capture_output=True, text=True,
                            timeout=120)
    assert scored.returncode == 1, scored.stderr  # one line failed
    assert (f"line {BAD_LINE}: unknown key 'contexs' ignored; did you mean 'contexts'?" in scored.stderr)
    assert f"line {BAD_LINE} failed (bad_input): missing required field 'contexts'" in scored.stderr
    made = subprocess.run([*CTXPREC, "report", str(scores), "-o", str(report)], capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr

    dom = rendered(report, tmp_path / "chromium-profile")
    page = parse(dom)
    assert "script" not in page.tags and page.external == []
    records = [json.loads(line) for line in scores.read_text().splitlines()]
    by_line = {r["line"]: r for r in records}

    # The lowest-scoring samples can be found: the question, the input line and the event's id.
    lowest = page.sections["lowest"]["rows"]
    assert len(lowest) == 10
    for score, service, question, where, *_ in lowest:
        found = re.fullmatch(r"line (\d+)id (q-\d+)", where)
        assert found, where
        record = by_line[int(found.group(1))]
        assert record["event_id"] == found.group(2) and question == record["query"] and service == "support-bot"
        assert float(score) == record["score"] and question in {q for q, _, _ in TOPICS}
        assert int(found.group(1)) > HEALTHY  # the degraded half scores lowest

    # A document without an id: its hash and its first words; one with an id: the id alone.
    noisy = {row[0]: row for row in page.sections["noisy-documents"]["rows"]}
    assert "newsletter" in noisy and "careers" in noisy
    (hashed,) = [name for name in noisy if name.startswith("sha256:")]
    assert re.fullmatch(r"sha256:[0-9a-f]{12}" + re.escape(COOKIES), hashed), hashed

    # One top-k rule: the rank section's recommendation is "The right top-k"'s, in its words.
    rank_k = re.search(r'id="top-k-hint" data-k="(\d+)"', dom)
    top_k = re.search(r'id="top-k-recommendation" data-k="(\d+)"', dom)
    assert rank_k and top_k and rank_k.group(1) == top_k.group(1) == "3"
    assert "the recommended top-k is 3 (the smallest k that keeps at least 95% of the relevant contexts" in \
        page.text("rank-relevance")

    # The drift, told with the levels the scores have: before, the mean of the healthy half; after,
    # the mean since the drift; the drop between the two as printed.
    def mean(rows: list[dict]) -> float:
        return sum(r["score"] for r in rows) / len(rows)

    healthy = [r for r in records if r["error"] is None and r["line"] <= HEALTHY + 1]
    degraded = [r for r in records if r["error"] is None and r["line"] > HEALTHY + 1]
    (drift,) = page.sections["drift"]["rows"]
    service, started, before, after, change, ended = drift
    assert service == "support-bot" and ended == "still alarmed at the last record"
    assert HEALTHY + 1 < int(started.removeprefix("line ")) <= HEALTHY + 1 + 60
    assert abs(float(before) - mean(healthy)) <= 0.05, (before, mean(healthy))
    assert abs(float(after) - mean(degraded)) <= 0.08, (after, mean(degraded))
    assert change == f"drop {abs(round(float(after) - float(before), 2)):.2f}"

    # The failed line: in the failures table with its line and reason.
    failures = {row[0]: row for row in page.sections["failures"]["rows"]}
    assert failures["bad_input"][1] == "1" and f"line {BAD_LINE}: missing required field 'contexts'" in \
        failures["bad_input"][2]


def test_page_parser_reads_cells_as_the_dom_gives_them() -> None:
    # The parser the test reads the DOM with: a cell's text is its text nodes joined.
    page: Page = parse('<section id="s"><table><tr><td>line 3<br>id <code>q-2</code></td></tr></table></section>')
    assert page.sections["s"]["rows"] == [["line 3id q-2"]]
