"""Resolved texts kept for reuse: least recently used first out once the bytes held pass the bound,
each reused for at most `ttl_s` (a document edited in the store is read again after that).

Keyed by (source, id): two sources may hold different texts under one id. The size counted is
the text's UTF-8 length plus the key's, a close lower bound of what Python holds for it."""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable


class TextCache:
    def __init__(self, max_bytes: int, ttl_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._items: OrderedDict[tuple[str, str], tuple[str, float, int]] = OrderedDict()  # -> text, expiry, size
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, source: str, doc_id: str) -> str | None:
        key = (source, doc_id)
        item = self._items.get(key)
        if item is None:
            return None
        text, expires, size = item
        if self._clock() >= expires:
            del self._items[key]
            self.bytes -= size
            return None
        self._items.move_to_end(key)
        return text

    def put(self, source: str, doc_id: str, text: str) -> None:
        key = (source, doc_id)
        size = len(text.encode("utf-8", "surrogatepass")) + len(doc_id) + len(source)
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= old[2]
        if size > self.max_bytes:
            return  # one text larger than the whole cache is not kept
        self._items[key] = (text, self._clock() + self.ttl_s, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, _, evicted) = self._items.popitem(last=False)
            self.bytes -= evicted
