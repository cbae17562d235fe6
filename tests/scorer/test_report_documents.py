"""The report's document and top-k sections, with known inputs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxprec.scorer.records import record_id, score_record
from ctxprec.scorer.result import JudgeUsage, ScoreResult, Verdict
from tests.scorer.test_report import render


def record(i: int, contexts: list[tuple[str, bool]], *, named: bool = True, retriever: str = "kb") -> dict[str, Any]:
    relevance = [rel for _, rel in contexts]
    result = ScoreResult(
        score=0.5, reason="...", verdicts=[Verdict(j, rel, "") for j, rel in enumerate(relevance)],
        precision_at_k=sum(relevance) / len(relevance), hit=any(relevance), first_relevant_rank=None,
        relevant_count=sum(relevance), k=len(relevance), scale=1, reference_kind="output",
        usage=JudgeUsage(model="local"),
    )
    return score_record(result, record_id=record_id(f"{i:032x}", f"{i:016x}", "fp"), trace_id=f"{i:032x}",
                        span_id=f"{i:016x}", service="support", retriever=retriever,
                        document_ids=[doc for doc, _ in contexts] if named else None)


def known_records(*, named: bool = True) -> list[dict[str, Any]]:
    """20 retrievals of 6 contexts. Rank 1 (faq-1) always relevant; rank 2 (faq-2) in half; rank 3
    (faq-3) in a quarter; rank 4 always spam-a, irrelevant; rank 5 spam-b (irrelevant) in half,
    else a one-off filler; rank 6 a one-off filler, irrelevant."""
    out = []
    for i in range(20):
        out.append(record(i, [
            ("faq-1", True),
            ("faq-2", i % 2 == 0),
            ("faq-3", i % 4 == 0),
            ("spam-a", False),
            ("spam-b" if i % 2 else f"filler-{i}-5", False),
            (f"filler-{i}-6", False),
        ], named=named, retriever="dense" if i < 10 else "sparse"))
    return out


def test_noisy_never_relevant_and_top_k_sections_show_the_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, page, html, err = render(tmp_path, known_records(), capsys)
    assert rc == 0, err
    for section in ("top-k", "noisy-documents", "never-relevant"):
        assert section in page.sections, section

    noisy = page.sections["noisy-documents"]["rows"]
    # document, judged irrelevant, retrieved, relevant, irrelevant rate, mean rank
    assert noisy[:4] == [
        ["spam-a", "20", "20", "0", "100.0%", "4.0"],
        ["faq-3", "15", "20", "5", "75.0%", "3.0"],
        ["spam-b", "10", "10", "0", "100.0%", "5.0"],  # ties on count: the higher rate first
        ["faq-2", "10", "20", "10", "50.0%", "2.0"],
    ]
    assert "faq-1" not in [row[0] for row in noisy]  # never irrelevant

    never = page.sections["never-relevant"]["rows"]
    assert never == [["spam-a", "20", "4.0"], ["spam-b", "10", "5.0"]]  # one-off fillers are not listed
    assert "2 of 35 documents" in page.text("never-relevant")

    # Relevant contexts: 20 at rank 1, 10 at rank 2, 5 at rank 3, none deeper: k = 3 keeps all of them.
    assert page.sections["top-k"]["svg"] == 1
    assert page.sections["top-k"]["points"] == pytest.approx([20 / 35, 30 / 35, 1, 1, 1, 1], abs=1e-4)
    assert 'data-k="3"' in html
    text = page.text("top-k")
    assert "Recommended top-k: 3" in text and "3.00 fewer contexts per request" in text
    pairs = page.sections["top-k"]["rows"]
    assert [row[:2] for row in pairs] == [["support", "dense"], ["support", "sparse"]]
    # One rule everywhere, its minimum of evidence included: each retriever saw 17 or 18 relevant
    # contexts, under the 30 the sidecar's ctxprec_recommended_k also waits for.
    assert all(row[4] == "\u2013" for row in pairs)


def test_records_without_documents_fall_back_gracefully(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, page, _, err = render(tmp_path, known_records(named=False), capsys)
    assert rc == 0, err
    for section in ("noisy-documents", "never-relevant"):
        assert "name no documents" in page.text(section)
        assert page.sections[section]["rows"] == []
    assert "Recommended top-k: 3" in page.text("top-k")  # ranks need no document names


def test_a_mix_of_old_and_new_records_counts_what_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = known_records() + known_records(named=False)[:2]
    rc, page, _, err = render(tmp_path, records, capsys)
    assert rc == 0, err
    assert page.sections["noisy-documents"]["rows"][0] == ["spam-a", "20", "20", "0", "100.0%", "4.0"]
    assert "12 verdicts of older records name no document" in page.text("noisy-documents")


def test_no_relevant_context_means_no_recommendation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [record(i, [(f"d{i}", False), ("x", False)]) for i in range(5)]
    rc, page, _, err = render(tmp_path, records, capsys)
    assert rc == 0, err
    assert "Too few relevant contexts" in page.text("top-k")
    assert "No document was judged irrelevant" not in page.text("noisy-documents")
    assert page.sections["never-relevant"]["rows"] == [["x", "5", "2.0"]]
