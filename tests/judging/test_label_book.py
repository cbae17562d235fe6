"""Label lines and their matching to verdicts (scorer/labels.py): each bad line refused with its
reason, labels matched in either order, replaced rather than counted twice, and every label that
could not be compared counted by why."""
from __future__ import annotations

import json

import pytest

from ctxprec.scorer.agreement import Confusion
from ctxprec.scorer.labels import Label, LabelBook, LabelError, parse_label, parse_lines

T1, S1 = "a" * 32, "1" * 16
T2, S2 = "b" * 32, "2" * 16


def _line(**fields: object) -> str:
    return json.dumps(fields)


class Recorder:
    def __init__(self) -> None:
        self.confusion: dict[str, Confusion] = {}
        self.unmatched: dict[str, int] = {}

    def pairs(self, judge: str, added: list, removed: list, annotator: str) -> None:
        c = self.confusion.setdefault(judge, Confusion())
        for a, b in added:
            c.add(a, b)
        for a, b in removed:  # the test's own inverse
            name = ("both_relevant" if a and b else "judge_only" if a else "reference_only" if b else "both_irrelevant")
            setattr(c, name, getattr(c, name) - 1)

    def miss(self, reason: str, n: int) -> None:
        self.unmatched[reason] = self.unmatched.get(reason, 0) + n


def _book(**kwargs: object) -> tuple[LabelBook, Recorder]:
    rec = Recorder()
    return LabelBook(on_pairs=rec.pairs, on_unmatched=rec.miss, **kwargs), rec  # type: ignore[arg-type]


@pytest.mark.parametrize("text, message", [
    ("{", "not valid JSON"),
    ("[1]", "expected a JSON object"),
    (_line(trace_id="xyz", span_id=S1, relevant=[True]), "trace_id must be 32 hex"),
    (_line(trace_id="0" * 32, span_id=S1, relevant=[True]), "not all zero"),
    (_line(trace_id=T1, span_id="12", relevant=[True]), "span_id must be 16 hex"),
    (_line(trace_id=T1, span_id=S1), "relevant is missing"),
    (_line(trace_id=T1, span_id=S1, relevant=[]), "non-empty list"),
    (_line(trace_id=T1, span_id=S1, relevant=[True, 1]), "not at index [1]"),
    (_line(trace_id=T1, span_id=S1, relevant=[True], context_index=0), "must be true or false"),
    (_line(trace_id=T1, span_id=S1, relevant=True, context_index=-1), "context_index must be"),
    (_line(trace_id=T1, span_id=S1, relevant=True, context_index=True), "context_index must be"),
    (_line(trace_id=T1, span_id=S1, relevant=[True], annotator=5), "annotator must be"),
    (_line(trace_id=T1, span_id=S1, relevant=[True], label="x"), "unknown key 'label'"),
])
def test_bad_lines_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(LabelError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_label(text)


def test_lines_are_numbered_and_stand_alone() -> None:
    lines = [_line(trace_id=T1.upper(), span_id=S1, relevant=[True, False]), "", "nope",
             _line(trace_id=T2, span_id=S2, context_index=2, relevant=False, annotator=" ana ")]
    parsed = list(parse_lines(lines))
    assert [n for n, _ in parsed] == [1, 3, 4]
    first, bad, last = (p for _, p in parsed)
    assert first == Label(T1, S1, (True, False))  # ids lowercased
    assert isinstance(bad, LabelError)
    assert last == Label(T2, S2, (False,), first=2, whole=False, annotator="ana")


def test_labels_match_verdicts_in_either_order_and_replace_not_double_count() -> None:
    book, rec = _book()
    book.verdicts(T1, S1, "cp-live", [True, False, True])
    assert book.label(Label(T1, S1, (True, True, False))).status == "matched"
    c = rec.confusion["cp-live"]
    assert (c.both_relevant, c.judge_only, c.reference_only, c.both_irrelevant) == (1, 1, 1, 0)
    # The same label again changes nothing; a changed one replaces it.
    assert book.label(Label(T1, S1, (True, True, False))).status == "matched"
    assert rec.confusion["cp-live"].total == 3
    assert book.label(Label(T1, S1, (False,), first=1, whole=False)).status == "matched"
    c = rec.confusion["cp-live"]
    assert c.total == 3 and c.both_irrelevant == 1 and c.reference_only == 0 and c.judge_only == 1
    # Another annotator's label on the same context is another labelled context.
    book.label(Label(T1, S1, (True,), first=0, whole=False, annotator="bo"))
    assert rec.confusion["cp-live"].total == 4

    # Before its verdicts: waiting, then matched when they come, for every judge that gives them.
    assert book.label(Label(T2, S2, (False, True))).status == "waiting"
    assert book.waiting_labels == 2
    book.verdicts(T2, S2, "cp-live", [False, False])
    assert book.waiting_labels == 0 and rec.confusion["cp-live"].total == 6
    book.verdicts(T2, S2, "cp-shadow", [True, True])
    s = rec.confusion["cp-shadow"]
    assert (s.both_relevant, s.judge_only) == (1, 1)


def test_what_cannot_be_compared_is_counted() -> None:
    now = [0.0]
    book, rec = _book(verdict_capacity=2, max_waiting=2, wait_s=10.0, clock=lambda: now[0])
    book.verdicts(T1, S1, "j", [True, False])
    mismatch = book.label(Label(T1, S1, (True,)))
    assert mismatch.status == "refused" and "lists 1 contexts; the retrieval had 2" in mismatch.reason
    past = book.label(Label(T1, S1, (True,), first=2, whole=False))
    assert past.status == "refused" and "past the retrieval's 2 contexts" in past.reason
    # Evicted: two newer retrievals push the first out; its late label is refused and counted.
    book.verdicts("c" * 32, S1, "j", [True])
    book.verdicts("d" * 32, S1, "j", [True])
    evicted = book.label(Label(T1, S1, (True, False)))
    assert evicted.status == "refused" and "verdict store" in evicted.reason
    # Waiting is bounded in number and in time.
    assert book.label(Label("e" * 32, S1, (True, True))).status == "waiting"
    overflow = book.label(Label("f" * 32, S1, (True,)))
    assert overflow.status == "refused" and "labels-max-waiting" in overflow.reason
    now[0] = 11.0
    book.expire()
    assert book.waiting_labels == 0
    # A waiting whole-retrieval label of the wrong length is a mismatch when its verdicts come.
    book.label(Label("9" * 32, S1, (True, True, True)))
    book.verdicts("9" * 32, S1, "j", [True])
    assert rec.unmatched == {"mismatch": 5, "evicted": 1, "overflow": 1, "expired": 2}
    assert book.stats()["unmatched"] == rec.unmatched
