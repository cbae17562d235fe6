"""Noisy documents: Space-Saving per (service, retriever), with its bounds checked against exact
counts, and the planted noisy documents found early on a Zipf stream."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from ctxprec.collector.diagnostics.heavy_hitters import SpaceSaving
from ctxprec.collector.diagnostics.noisy_documents import NoisyDocuments
from ctxprec.scorer.documents import cut_words
from ctxprec.scorer.result import Verdict
from tests.diagnostics.streams import NOISY, zipf_stream

CHECKPOINTS = (500, 1000, 2000, 5000, 10000, 20000)


def verdicts(relevant: list[bool]) -> list[Verdict]:
    return [Verdict(i, r, "") for i, r in enumerate(relevant)]


@pytest.mark.parametrize("slots", [1000, 100])
def test_the_planted_noisy_documents_top_the_list_within_2000_scores(slots: int) -> None:
    noisy = NoisyDocuments(slots=slots)
    exact_irrelevant: Counter[str] = Counter()
    exact_retrieved: Counter[str] = Counter()
    found_at: int | None = None
    for n, scored in enumerate(zipf_stream(20_000), start=1):
        noisy.observe("shop", "kb", verdicts(scored.relevant), scored.documents)
        exact_irrelevant.update(d for d, rel in zip(scored.documents, scored.relevant) if not rel)
        exact_retrieved.update(scored.documents)
        if n in CHECKPOINTS:
            summary = noisy.summary("shop", "kb")
            assert summary is not None and len(summary) <= slots
            top = {row.document for row in noisy.top("shop", "kb", 5)}
            if top == NOISY and found_at is None:
                found_at = n
            if n >= 2000:
                assert top == NOISY, f"after {n} scores the top 5 were {sorted(top)}"
                assert summary.exact_top(5)
    summary = noisy.summary("shop", "kb")
    assert summary is not None
    assert len(summary) == slots  # full, and never more
    assert summary.evictions > 0  # the long tail churned through the slots: the bound was exercised
    assert found_at is not None and found_at <= 2000
    # The exact top 5 by irrelevant verdicts are the planted ones: the stream does what it says.
    assert {d for d, _ in exact_irrelevant.most_common(5)} == NOISY
    # ... and popularity alone would point elsewhere: the most retrieved document is a good one.
    assert exact_retrieved.most_common(1)[0][0] not in NOISY
    # Rows carry counts that hold up against the exact ones.
    rows = noisy.top("shop", "kb", 5)
    assert len(rows) == 5
    for row in rows:
        assert row.irrelevant - row.error <= exact_irrelevant[row.document] <= row.irrelevant
        assert row.irrelevant_rate > 0.8 and 1 <= row.mean_rank <= 5
        assert row.retrieved == row.relevant + row.irrelevant - row.error


def test_space_saving_bounds_hold_for_every_key() -> None:
    rng = random.Random(3)
    keys = [f"k{int(rng.paretovariate(1.1))}" for _ in range(30_000)]
    summary: SpaceSaving[None] = SpaceSaving(64, lambda: None)
    exact = Counter(keys)
    for key in keys:
        summary.increment(key)
    assert len(summary) == 64 and summary.total == len(keys)
    assert summary.floor <= len(keys) / 64
    for slot in summary:
        assert slot.lower_bound <= exact[slot.key] <= slot.count
    for key, count in exact.items():
        if count > summary.floor:
            assert key in summary, f"{key} counted {count} > floor {summary.floor} but not held"


def test_space_saving_evicts_the_oldest_key_at_the_floor() -> None:
    summary: SpaceSaving[None] = SpaceSaving(2, lambda: None)
    for key in ("a", "b", "b"):
        summary.increment(key)
    slot = summary.increment("c")  # replaces a (count 1): inherits 1 as error
    assert "a" not in summary and (slot.count, slot.error) == (2, 1)
    assert summary.floor == 2
    summary.increment("d")  # b and c both at 2; b got there first
    assert "b" not in summary and "c" in summary
    assert [s.key for s in summary.top(2)] == ["d", "c"]  # equal counts: the smaller error first
    assert not summary.exact_top(1)


def test_relevant_verdicts_of_untracked_documents_take_no_slot() -> None:
    noisy = NoisyDocuments(slots=4)
    noisy.observe("s", "r", verdicts([True, True, False]), ["a", "b", "c"])
    noisy.observe("s", "r", verdicts([False, True]), ["a", "c"])
    summary = noisy.summary("s", "r")
    assert summary is not None and sorted(s.key for s in summary) == ["a", "c"]
    (row_c, row_a) = sorted(noisy.top("s", "r", 10), key=lambda r: r.document, reverse=True)
    assert (row_c.document, row_c.retrieved, row_c.relevant, row_c.irrelevant) == ("c", 2, 1, 1)
    assert row_c.mean_rank == pytest.approx(2.5)  # ranks 3 then 2
    assert (row_a.retrieved, row_a.relevant, row_a.irrelevant_rate) == (1, 0, 1.0)
    assert noisy.top("s", "other-retriever", 5) == []
    assert noisy.pairs() == [("s", "r")]


def test_previews_are_off_by_default_and_redacted_and_short_when_on() -> None:
    text = "Contact jane.doe@example.com about refunds. " + "Refunds take five working days to arrive. " * 10
    plain = NoisyDocuments(slots=4)
    plain.observe("s", "r", verdicts([False]), ["doc-1"], [text])
    (row,) = plain.top("s", "r", 1)
    assert row.preview is None and "preview" not in row.to_dict()
    assert "Refunds" not in str(row.to_dict())

    with pytest.raises(ValueError):
        NoisyDocuments(previews=True)
    shown = NoisyDocuments(slots=4, previews=True, redact=lambda t: t.replace("jane.doe@example.com", "[EMAIL]"))
    shown.observe("s", "r", verdicts([False]), ["doc-1"], [text])
    (row,) = shown.top("s", "r", 1)
    assert row.preview is not None and len(row.preview) <= 80
    assert row.preview.startswith("Contact [EMAIL] about refunds.") and row.preview.endswith("\u2026")
    assert "jane.doe" not in row.preview


def test_cut_words_keeps_whole_words() -> None:
    assert cut_words("short", 80) == "short"
    cut = cut_words("alpha beta gamma delta epsilon", 16)
    assert cut == "alpha beta\u2026" and len(cut) <= 16
