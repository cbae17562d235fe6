"""Human labels on scored retrievals, and their matching to the judge's verdicts.

A label line (JSON, one per line; `POST /labels`, `serve --labels-file`, `score --labels`,
`report --labels`) is either

    {"trace_id": HEX32, "span_id": HEX16, "relevant": [true, false, ...]}   one per context, rank order
    {"trace_id": HEX32, "span_id": HEX16, "context_index": N, "relevant": true}

with an optional `"annotator"`. Each line stands on its own: a bad line is refused with its
number and the reason, and never loses the good ones beside it.

`LabelBook` pairs labels with verdicts in either order: a label for a retrieval whose verdicts are
not known yet waits (bounded in number and time) and is matched when they arrive. The same
(retrieval, context, annotator) labelled again replaces the earlier label (so re-reading a file
or re-sending a body counts nothing twice). Verdicts are kept for the most recent retrievals only;
a label for one whose verdicts were evicted is refused as such and counted, never dropped silently.
Every comparison goes to `on_pairs(judge, added, removed, annotator)`: pairs of (judge's verdict,
person's verdict), `removed` being those a replaced label takes back."""
from __future__ import annotations

import json
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

from ctxprec.scorer.agreement import Confusion

MAX_LINE_BYTES = 64 * 1024
MAX_CONTEXTS = 1000  # contexts one label line may cover (the judge caps contexts per retrieval far lower)
MAX_ANNOTATOR_CHARS = 200
MAX_ANNOTATORS_PER_RETRIEVAL = 20  # distinct annotators kept per retrieval; more are refused
_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")
_SPAN_ID = re.compile(r"[0-9a-fA-F]{16}")
_KEYS = {"trace_id", "span_id", "relevant", "context_index", "annotator"}

Pair = tuple[bool, bool]  # (judge's verdict, person's verdict)
PairsObserver = Callable[[str, list[Pair], list[Pair], str], None]
UnmatchedObserver = Callable[[str, int], None]

# Why a label was not compared (the `reason` of ctxprec_judge_labels_unmatched_total).
EVICTED = "evicted"
EXPIRED = "expired"
OVERFLOW = "overflow"
MISMATCH = "mismatch"
UNMATCHED_REASONS = (EVICTED, EXPIRED, OVERFLOW, MISMATCH)


@dataclass(frozen=True, slots=True)
class Label:
    """One line: `relevant` per context from `first` on (the whole retrieval when `whole`)."""

    trace_id: str  # lowercase hex
    span_id: str
    relevant: tuple[bool, ...]
    first: int = 0
    whole: bool = True  # a list for every context: its length must be the retrieval's
    annotator: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.trace_id, self.span_id


class LabelError(ValueError):
    """What is wrong with one label line, in words for the sender."""


def parse_label(text: str | bytes) -> Label:
    if isinstance(text, bytes):
        if len(text) > MAX_LINE_BYTES:
            raise LabelError(f"line longer than {MAX_LINE_BYTES} bytes")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise LabelError("not valid UTF-8") from None
    elif len(text) > MAX_LINE_BYTES:
        raise LabelError(f"line longer than {MAX_LINE_BYTES} bytes")
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise LabelError(f"not valid JSON ({getattr(exc, 'msg', exc)})") from None
    if not isinstance(obj, dict):
        raise LabelError("expected a JSON object with trace_id, span_id and relevant")
    unknown = sorted(set(obj) - _KEYS)
    if unknown:
        raise LabelError(f"unknown key {unknown[0][:40]!r} (expected trace_id, span_id, relevant, context_index, "
                         "annotator)")
    trace_id, span_id = obj.get("trace_id"), obj.get("span_id")
    if not isinstance(trace_id, str) or not _TRACE_ID.fullmatch(trace_id) or not trace_id.strip("0"):
        raise LabelError(f"trace_id must be 32 hex digits (not all zero), got {_shown(trace_id)}")
    if not isinstance(span_id, str) or not _SPAN_ID.fullmatch(span_id) or not span_id.strip("0"):
        raise LabelError(f"span_id must be 16 hex digits (not all zero), got {_shown(span_id)}")
    annotator = obj.get("annotator", "")
    if annotator is None:
        annotator = ""
    if not isinstance(annotator, str) or len(annotator) > MAX_ANNOTATOR_CHARS:
        raise LabelError(f"annotator must be a string of at most {MAX_ANNOTATOR_CHARS} characters")
    if "relevant" not in obj:
        raise LabelError("relevant is missing (a list of true/false per context, or one true/false with "
                         "context_index)")
    relevant = obj["relevant"]
    key = (trace_id.lower(), span_id.lower())
    if "context_index" in obj:
        index = obj["context_index"]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_CONTEXTS:
            raise LabelError(f"context_index must be a whole number from 0 to {MAX_CONTEXTS - 1}, "
                             f"got {_shown(index)}")
        if not isinstance(relevant, bool):
            raise LabelError(f"with context_index, relevant must be true or false, got {_shown(relevant)}")
        return Label(*key, relevant=(relevant,), first=index, whole=False, annotator=annotator.strip())
    if not isinstance(relevant, list) or not relevant:
        raise LabelError(f"relevant must be a non-empty list of true/false (one per context, in rank order), "
                         f"got {_shown(relevant)}")
    if len(relevant) > MAX_CONTEXTS:
        raise LabelError(f"relevant lists {len(relevant)} contexts, more than {MAX_CONTEXTS}")
    bad = [i for i, value in enumerate(relevant) if not isinstance(value, bool)]
    if bad:
        raise LabelError(f"relevant must hold only true or false; not at index {bad[:5]}")
    return Label(*key, relevant=tuple(relevant), annotator=annotator.strip())


def parse_lines(lines: Iterable[bytes | str]) -> Iterator[tuple[int, Label | LabelError]]:
    """Each non-blank line numbered from 1, as a Label or the LabelError saying what is wrong."""
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            if number == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")
            if not raw.strip():
                continue
        else:
            if number == 1:
                raw = raw.lstrip("\ufeff")
            if not raw.strip():
                continue
        try:
            yield number, parse_label(raw)
        except LabelError as error:
            yield number, error


def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(slots=True)
class _Labelled:
    """The labels given for one retrieval: (context index, annotator) -> person's verdict, with
    the length each whole-retrieval label declared (checked when the verdicts are known)."""

    verdicts: dict[tuple[int, str], bool] = field(default_factory=dict)
    declared: dict[str, int] = field(default_factory=dict)  # annotator -> contexts its whole list had
    since: float = 0.0  # monotonic time the first waiting label came


@dataclass(slots=True)
class Outcome:
    """What one label line came to."""

    status: str  # "matched" | "waiting" | "refused"
    reason: str = ""


class LabelBook:
    def __init__(self, *, verdict_capacity: int = 10_000, max_waiting: int = 10_000, wait_s: float = 900.0,
                 on_pairs: PairsObserver | None = None, on_unmatched: UnmatchedObserver | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.verdict_capacity = max(1, verdict_capacity)
        self.max_waiting = max(0, max_waiting)
        self.wait_s = wait_s
        self.on_pairs = on_pairs
        self.on_unmatched = on_unmatched
        self.clock = clock
        # (trace, span) -> {judge fingerprint: verdicts in rank order}; oldest first.
        self._verdicts: OrderedDict[tuple[str, str], dict[str, tuple[bool, ...]]] = OrderedDict()
        # Keys whose verdicts were evicted (bounded alike), so that a late label can be told apart
        # from one for a retrieval never scored.
        self._evicted: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._labels: dict[tuple[str, str], _Labelled] = {}
        # Retrievals labelled before their verdicts came, in arrival order, with their label count.
        self._waiting: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.waiting_labels = 0
        self.unmatched: dict[str, int] = {}

    # -- verdicts --

    def verdicts(self, trace_id: str, span_id: str, judge: str, verdicts: Sequence[bool]) -> None:
        """A judge's verdicts for a retrieval (in rank order); labels waiting for it are matched."""
        self.expire()
        key = (trace_id.lower(), span_id.lower())
        judged = self._verdicts.get(key)
        if judged is None:
            judged = self._verdicts[key] = {}
            self._evicted.pop(key, None)
            while len(self._verdicts) > self.verdict_capacity:
                old, _ = self._verdicts.popitem(last=False)
                self._labels.pop(old, None)
                self._evicted[old] = None
                while len(self._evicted) > self.verdict_capacity:
                    self._evicted.popitem(last=False)
        else:
            self._verdicts.move_to_end(key)
        previous = judged.get(judge)
        judged[judge] = tuple(bool(v) for v in verdicts)
        labelled = self._labels.get(key)
        if labelled is None:
            return
        count = self._waiting.pop(key, None)
        if count is not None:
            self.waiting_labels -= count
        if previous is None:
            self._check_lengths(key, labelled, len(verdicts))
            self._compare(judge, judged[judge], list(labelled.verdicts.items()), ())
        elif previous != judged[judge] and len(previous) == len(judged[judge]):
            # The same judge judged the retrieval again (a re-sent trace): its new verdicts count.
            items = list(labelled.verdicts.items())
            self._compare(judge, previous, (), items)
            self._compare(judge, judged[judge], items, ())

    def _check_lengths(self, key: tuple[str, str], labelled: _Labelled, contexts: int) -> None:
        """Labels that do not fit the retrieval's contexts (a whole list of another length, an
        index past its end) are dropped and counted as mismatch."""
        wrong = {annotator for annotator, n in labelled.declared.items() if n != contexts}
        dropped = [k for k in labelled.verdicts if k[0] >= contexts or k[1] in wrong]
        for k in dropped:
            del labelled.verdicts[k]
        for annotator in wrong:
            del labelled.declared[annotator]
        self._count(MISMATCH, len(dropped))
        if not labelled.verdicts:
            self._labels.pop(key, None)

    # -- labels --

    def label(self, label: Label) -> Outcome:
        self.expire()
        key = label.key
        judged = self._verdicts.get(key)
        if judged is None and key in self._evicted:
            self._count(EVICTED, 1)
            return Outcome("refused", "the verdicts for this retrieval have left the verdict store "
                                      "(--verdict-store-size); the label is counted as evicted")
        labelled = self._labels.get(key)
        if labelled is not None:
            annotators = {a for _, a in labelled.verdicts} | set(labelled.declared)
            if label.annotator not in annotators and len(annotators) >= MAX_ANNOTATORS_PER_RETRIEVAL:
                return Outcome("refused", f"more than {MAX_ANNOTATORS_PER_RETRIEVAL} annotators for this retrieval")
        if judged:
            contexts = len(next(iter(judged.values())))
            if label.whole and len(label.relevant) != contexts:
                self._count(MISMATCH, 1)
                return Outcome("refused", f"relevant lists {len(label.relevant)} contexts; the retrieval had "
                                          f"{contexts}")
            if label.first + len(label.relevant) > contexts:
                self._count(MISMATCH, 1)
                return Outcome("refused", f"context_index {label.first} is past the retrieval's {contexts} "
                                          "contexts (counted from 0)")
        else:
            if self.waiting_labels >= self.max_waiting:
                self._count(OVERFLOW, 1)
                return Outcome("refused", f"{self.max_waiting} labels already wait for verdicts "
                                          "(--labels-max-waiting); counted as overflow")
        if labelled is None:
            labelled = self._labels[key] = _Labelled(since=self.clock())
        if label.whole:
            labelled.declared[label.annotator] = len(label.relevant)
        changed: list[tuple[tuple[int, str], bool | None, bool]] = []
        for offset, value in enumerate(label.relevant):
            slot = (label.first + offset, label.annotator)
            before = labelled.verdicts.get(slot)
            if before != value:
                changed.append((slot, before, value))
                labelled.verdicts[slot] = value
        if not judged:
            if key not in self._waiting:
                self._waiting[key] = 0
            added = sum(1 for _, before, _ in changed if before is None)
            self._waiting[key] += added
            self.waiting_labels += added
            return Outcome("waiting")
        for judge, verdicts in judged.items():
            self._compare(judge, verdicts, [(slot, value) for slot, _, value in changed],
                          [(slot, before) for slot, before, _ in changed if before is not None])
        return Outcome("matched")

    def _compare(self, judge: str, verdicts: tuple[bool, ...], added: Iterable[tuple[tuple[int, str], bool]],
                 removed: Iterable[tuple[tuple[int, str], bool]]) -> None:
        if self.on_pairs is None:
            return
        by_annotator: dict[str, tuple[list[Pair], list[Pair]]] = {}
        for (index, annotator), value in added:
            by_annotator.setdefault(annotator, ([], []))[0].append((verdicts[index], value))
        for (index, annotator), value in removed:
            by_annotator.setdefault(annotator, ([], []))[1].append((verdicts[index], value))
        for annotator, (plus, minus) in by_annotator.items():
            self.on_pairs(judge, plus, minus, annotator)

    # -- bounds --

    def expire(self) -> None:
        """Labels that waited longer than `wait_s` for their verdicts are dropped and counted."""
        if not self._waiting:
            return
        deadline = self.clock() - self.wait_s
        while self._waiting:
            key, count = next(iter(self._waiting.items()))
            labelled = self._labels.get(key)
            if labelled is not None and labelled.since > deadline:
                break
            self._waiting.popitem(last=False)
            self._labels.pop(key, None)
            self.waiting_labels -= count
            self._count(EXPIRED, count)

    def _count(self, reason: str, n: int) -> None:
        if n <= 0:
            return
        self.unmatched[reason] = self.unmatched.get(reason, 0) + n
        if self.on_unmatched is not None:
            self.on_unmatched(reason, n)

    def stats(self) -> dict[str, Any]:
        return {"verdicts_kept": len(self._verdicts), "verdict_capacity": self.verdict_capacity,
                "labels_waiting": self.waiting_labels, "max_waiting": self.max_waiting, "wait_s": self.wait_s,
                "unmatched": dict(self.unmatched)}


# -- offline: labels against score records (`ctxprec score --labels`, `ctxprec report --labels`) --

MAX_REFUSED_KEPT = 20


@dataclass(slots=True)
class LabelledAgreement:
    """People's labels against the verdicts in a set of score records, per judge."""

    per_judge: dict[str, Confusion] = field(default_factory=dict)
    labels: int = 0  # label lines taken
    refused: list[tuple[int, str]] = field(default_factory=list)  # (line, reason), the first few
    refused_count: int = 0
    not_found: int = 0  # labelled contexts of retrievals the records do not hold
    mismatched: int = 0  # labelled contexts that do not fit their retrieval's contexts

    @property
    def contexts(self) -> int:
        return sum(c.total for c in self.per_judge.values())


def record_verdicts(record: dict[str, Any]) -> tuple[str, str, list[bool]] | None:
    """(trace id, span id, verdicts in rank order) of a scored record; None for a failed one or
    one without ids (a label names its retrieval by trace and span id)."""
    if record.get("error") or not isinstance(record.get("verdicts"), list):
        return None
    trace_id, span_id = record.get("trace_id"), record.get("span_id")
    if not isinstance(trace_id, str) or not isinstance(span_id, str) or not trace_id or not span_id:
        return None
    rows = [v for v in record["verdicts"] if isinstance(v, dict) and isinstance(v.get("index"), int)
            and isinstance(v.get("relevant"), bool)]
    if not rows or len(rows) != len(record["verdicts"]):
        return None
    rows.sort(key=lambda v: v["index"])
    return trace_id, span_id, [v["relevant"] for v in rows]


def agreement_of(records: Iterable[dict[str, Any]], label_lines: Iterable[bytes | str],
                 judge_of: Callable[[dict[str, Any]], str]) -> LabelledAgreement:
    """Matches every label line to the records' verdicts; `judge_of(record)` names the judge."""
    result = LabelledAgreement()

    def pairs(judge: str, added: list[Pair], removed: list[Pair], annotator: str) -> None:
        confusion = result.per_judge.setdefault(judge, Confusion())
        for said, truth in added:
            confusion.add(said, truth)
        for said, truth in removed:
            name = ("both_relevant" if said and truth else "judge_only" if said
                    else "reference_only" if truth else "both_irrelevant")
            setattr(confusion, name, max(0, getattr(confusion, name) - 1))

    def unmatched(reason: str, n: int) -> None:
        if reason == MISMATCH:
            result.mismatched += n

    book = LabelBook(verdict_capacity=1 << 62, max_waiting=1 << 62, wait_s=float("inf"),
                     on_pairs=pairs, on_unmatched=unmatched)
    for record in records:
        found = record_verdicts(record)
        if found is not None:
            book.verdicts(found[0], found[1], judge_of(record), found[2])
    for number, parsed in parse_lines(label_lines):
        if isinstance(parsed, LabelError):
            reason = str(parsed)
        else:
            outcome = book.label(parsed)
            if outcome.status != "refused":
                result.labels += 1
                continue
            reason = outcome.reason
        result.refused_count += 1
        if len(result.refused) < MAX_REFUSED_KEPT:
            result.refused.append((number, reason))
    result.not_found = book.waiting_labels
    return result


def agreement_text(confusion: Confusion) -> str:
    """One line of figures: agreement, kappa with its interval, precision and recall."""
    def number(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    interval = confusion.kappa_interval()
    shown = f" (95% {interval[0]:.3f} to {interval[1]:.3f})" if interval else ""
    return (f"{confusion.total} labelled contexts, agreement {number(confusion.agreement)}, "
            f"kappa {number(confusion.kappa)}{shown}, precision {number(confusion.precision)}, "
            f"recall {number(confusion.recall)}")
