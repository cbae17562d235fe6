"""The right top-k, live: per (service, retriever), contexts judged and found relevant at each
rank and the characters they held, turned into a recommendation by scorer.top_k on demand.

Memory per pair is three lists as long as the deepest rank seen (capped at `max_rank`; deeper
contexts count at the last rank). Counts are halved every `halve_every` requests of a pair, so
the recommendation follows a retriever that changes (a new index, a reranker) instead of
averaging over its whole history; the ratios it is computed from are unchanged by halving."""
from __future__ import annotations

from typing import Protocol, Sequence

from ctxprec.scorer.top_k import DEFAULT_KEEP, DEFAULT_MIN_RELEVANT, RankCounts, TopKAdvice, recommend_top_k

DEFAULT_MAX_RANK = 100
DEFAULT_HALVE_EVERY = 100_000


class Judged(Protocol):
    @property
    def index(self) -> int: ...

    @property
    def relevant(self) -> bool: ...


class RankTally:
    """Running counts by rank (index 0 = rank 1) for one (service, retriever)."""

    __slots__ = ("judged", "relevant", "chars", "requests", "version", "_advice", "_advice_version")

    def __init__(self) -> None:
        self.judged: list[float] = []
        self.relevant: list[float] = []
        self.chars: list[float] = []
        self.requests = 0.0
        self.version = 0  # bumped on every change, so that advice is recomputed only when needed
        self._advice: TopKAdvice | None = None
        self._advice_version = -1

    def halve(self) -> None:
        self.judged = [x * 0.5 for x in self.judged]
        self.relevant = [x * 0.5 for x in self.relevant]
        self.chars = [x * 0.5 for x in self.chars]
        self.requests *= 0.5

    def ranks(self) -> list[RankCounts]:
        return [RankCounts(i + 1, j, r, c) for i, (j, r, c) in enumerate(zip(self.judged, self.relevant, self.chars))]


class TopKTracker:
    def __init__(self, *, max_rank: int = DEFAULT_MAX_RANK, keep: float = DEFAULT_KEEP,
                 min_relevant: float = DEFAULT_MIN_RELEVANT, halve_every: int = DEFAULT_HALVE_EVERY) -> None:
        if max_rank < 1:
            raise ValueError(f"max_rank must be >= 1, got {max_rank}")
        if not 0 < keep <= 1:
            raise ValueError(f"keep must be in (0, 1], got {keep!r}")
        if halve_every < 2:
            raise ValueError(f"halve_every must be >= 2, got {halve_every}")
        self.max_rank = max_rank
        self.keep = keep
        self.min_relevant = min_relevant
        self.halve_every = halve_every
        self._tallies: dict[tuple[str, str], RankTally] = {}

    def observe(self, service: str, retriever: str, verdicts: Sequence[Judged], sizes: Sequence[int]) -> bool:
        """One scored retrieval: its verdicts and the size in characters of each context by index.
        Returns True when this (service, retriever) was seen for the first time."""
        key = (service, retriever)
        tally = self._tallies.get(key)
        new = tally is None
        if tally is None:
            tally = self._tallies[key] = RankTally()
        judged, relevant, chars = tally.judged, tally.relevant, tally.chars
        last = self.max_rank - 1
        # Verdict indices are below the number of contexts (one verdict per context).
        known = len(sizes)
        depth = min(self.max_rank, max(known, len(verdicts)))
        if depth > len(judged):
            grow = [0.0] * (depth - len(judged))
            judged.extend(grow)
            relevant.extend(grow)
            chars.extend(grow)
        for verdict in verdicts:
            index = verdict.index
            at = index if index <= last else last
            if at < 0 or at >= len(judged):
                continue
            judged[at] += 1.0
            if verdict.relevant:
                relevant[at] += 1.0
            if index < known:
                chars[at] += sizes[index]
        tally.requests += 1.0
        tally.version += 1
        if tally.requests >= self.halve_every:
            tally.halve()
        return new

    def pairs(self) -> list[tuple[str, str]]:
        return sorted(self._tallies)

    def tally(self, service: str, retriever: str) -> RankTally | None:
        return self._tallies.get((service, retriever))

    def advice(self, service: str, retriever: str) -> TopKAdvice | None:
        """The recommendation for a pair (None if never seen); recomputed only after new counts."""
        tally = self._tallies.get((service, retriever))
        if tally is None:
            return None
        if tally._advice_version != tally.version:
            tally._advice = recommend_top_k(tally.ranks(), requests=tally.requests, keep=self.keep,
                                            min_relevant=self.min_relevant)
            tally._advice_version = tally.version
        return tally._advice
