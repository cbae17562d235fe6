"""Noisy documents: per (service, retriever), the documents most often retrieved and judged
irrelevant, in a Space-Saving summary of fixed size (heavy_hitters.py).

The summary counts irrelevant verdicts by document identity (scorer.documents). A document enters
on an irrelevant verdict; while it holds a slot, its relevant verdicts and the ranks it was
retrieved at are counted too, so each row says how often it was retrieved, relevant and
irrelevant while tracked, its irrelevant rate and mean rank. Documents only ever judged relevant
never take a slot: they are not what this view is for.

Text previews are off by default: rows then carry identities only (ids, or hashes of the text).
With previews on, a slot keeps a short window of the document's text from when it entered, and
the view shows at most `preview_chars` of it after the caller's redaction."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from ctxprec.collector.diagnostics.heavy_hitters import SpaceSaving
from ctxprec.scorer.documents import cut_words, is_text_hash

DEFAULT_SLOTS = 1000
DEFAULT_PREVIEW_CHARS = 80
# Text kept per slot when previews are on: more than is shown, so that redaction sees whole
# e-mail addresses and phone numbers around the cut instead of fragments it cannot recognise.
_WINDOW_FACTOR = 4


class Judged(Protocol):
    """A verdict as the summaries read it (scorer.result.Verdict fits)."""

    @property
    def index(self) -> int: ...

    @property
    def relevant(self) -> bool: ...


class DocumentTally:
    """What a slot knows beyond its Space-Saving count, counted while the document is tracked."""

    __slots__ = ("relevant", "rank_sum", "window")

    def __init__(self) -> None:
        self.relevant = 0
        self.rank_sum = 0  # 1-based ranks of every tracked retrieval, relevant or not
        self.window: str | None = None


@dataclass(frozen=True, slots=True)
class NoisyDocument:
    document: str
    irrelevant: int  # Space-Saving count: the true count is in [irrelevant - error, irrelevant]
    error: int
    retrieved: int  # while tracked
    relevant: int  # while tracked
    irrelevant_rate: float  # irrelevant / retrieved, while tracked
    mean_rank: float  # 1-based, while tracked
    preview: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "document": self.document,
            "kind": "text_hash" if is_text_hash(self.document) else "id",
            "irrelevant": self.irrelevant,
            "error": self.error,
            "retrieved": self.retrieved,
            "relevant": self.relevant,
            "irrelevant_rate": round(self.irrelevant_rate, 4),
            "mean_rank": round(self.mean_rank, 2),
        }
        if self.preview is not None:
            out["preview"] = self.preview
        return out


class NoisyDocuments:
    """One Space-Saving summary per (service, retriever). The caller caps both labels (the sink
    uses the metrics' label caps), which bounds the number of summaries."""

    def __init__(self, slots: int = DEFAULT_SLOTS, *, previews: bool = False,
                 redact: Callable[[str], str] | None = None, preview_chars: int = DEFAULT_PREVIEW_CHARS) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        if previews and redact is None:
            # Made explicit so that turning previews on is a decision about redaction too; pass
            # `lambda text: text` to show text as it is.
            raise ValueError("previews need a redaction callable")
        if preview_chars < 8:
            raise ValueError(f"preview_chars must be >= 8, got {preview_chars}")
        self.slots = slots
        self.previews = previews
        self.preview_chars = preview_chars
        self._redact = redact
        self._summaries: dict[tuple[str, str], SpaceSaving[DocumentTally]] = {}

    def observe(self, service: str, retriever: str, verdicts: Sequence[Judged], documents: Sequence[str],
                contents: Sequence[str] | None = None) -> None:
        """One scored retrieval: its verdicts, and the identity (and text, only read when previews
        are on) of each context by index."""
        key = (service, retriever)
        summary = self._summaries.get(key)
        if summary is None:
            summary = self._summaries[key] = SpaceSaving(self.slots, DocumentTally)
        count = len(documents)
        held = summary.held
        increment = summary.increment
        previews = self.previews and contents is not None
        for verdict in verdicts:
            index = verdict.index
            if not 0 <= index < count:
                continue
            if verdict.relevant:
                slot = held.get(documents[index])
                if slot is None:
                    continue
                data = slot.data
                data.relevant += 1
            else:
                data = increment(documents[index]).data
                if previews and data.window is None and index < len(contents):  # type: ignore[arg-type]
                    data.window = _window(contents[index], self.preview_chars * _WINDOW_FACTOR)  # type: ignore[index]
            data.rank_sum += index + 1

    def pairs(self) -> list[tuple[str, str]]:
        return sorted(self._summaries)

    def summary(self, service: str, retriever: str) -> SpaceSaving[DocumentTally] | None:
        return self._summaries.get((service, retriever))

    def top(self, service: str, retriever: str, limit: int) -> list[NoisyDocument]:
        summary = self._summaries.get((service, retriever))
        if summary is None:
            return []
        rows = []
        for slot in summary.top(limit):
            seen_irrelevant = slot.lower_bound
            retrieved = seen_irrelevant + slot.data.relevant
            rows.append(NoisyDocument(
                document=slot.key,
                irrelevant=slot.count,
                error=slot.error,
                retrieved=retrieved,
                relevant=slot.data.relevant,
                irrelevant_rate=seen_irrelevant / retrieved if retrieved else 0.0,
                mean_rank=slot.data.rank_sum / retrieved if retrieved else 0.0,
                preview=self._preview(slot.data.window) if self.previews else None,
            ))
        return rows

    def _preview(self, window: str | None) -> str | None:
        if window is None or self._redact is None:
            return None
        return cut_words(" ".join(self._redact(window).split()), self.preview_chars)


def _window(text: str, chars: int) -> str:
    """The start of `text`, at most `chars` long, ending on a word boundary when there is one."""
    if len(text) <= chars:
        return text
    head = text[:chars]
    space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    return head[:space] if space > chars // 2 else head
