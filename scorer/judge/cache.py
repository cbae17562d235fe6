"""Bounded LRU cache of per-context verdicts.

The key covers everything the verdict depends on: model, prompt version, the reference text,
the query and the context text as sent (after truncation). It is hashed so that the cache holds
32 bytes per key rather than whole documents."""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True, slots=True)
class CachedVerdict:
    relevant: bool
    reason: str


def _framed(text: str) -> bytes:
    # Length-prefixed, so that no two different field tuples hash the same bytes.
    data = text.encode("utf-8", "surrogatepass")
    return len(data).to_bytes(8, "big") + data


def verdict_keys(model: str, prompt_version: str, reference: str, query: str, contexts: Sequence[str]) -> list[bytes]:
    """`verdict_key` of each context of one sample: the fields they share are hashed once."""
    prefix = hashlib.sha256(b"".join(_framed(f) for f in (model, prompt_version, reference, query)))
    keys = []
    for context in contexts:
        h = prefix.copy()
        h.update(_framed(context))
        keys.append(h.digest())
    return keys


def verdict_key(model: str, prompt_version: str, reference: str, query: str, context: str) -> bytes:
    return verdict_keys(model, prompt_version, reference, query, (context,))[0]


class VerdictCache:
    def __init__(self, max_size: int) -> None:
        if max_size < 0:
            raise ValueError(f"cache_size: must be >= 0, got {max_size!r}")
        self.max_size = max_size
        self._items: OrderedDict[bytes, CachedVerdict] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: bytes) -> CachedVerdict | None:
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return item

    def put(self, key: bytes, verdict: CachedVerdict) -> None:
        if self.max_size == 0:
            return
        self._items[key] = verdict
        self._items.move_to_end(key)
        while len(self._items) > self.max_size:
            self._items.popitem(last=False)
