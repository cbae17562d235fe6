"""Sharing the event loop during a long piece of work (one large OTLP request, a burst of ready
traces): everything the sidecar serves runs on one loop, so a loop over 100,000 spans must let
the others (/healthz, other clients, the senders) have their turn every few milliseconds.

The work goes in chunks; after each, `due()` says whether the time slice is used up, and
`give()` yields to the loop. A request of the usual size (the SDKs send 512 spans) finishes
within its first slice and never yields, so the common path pays one clock read per chunk."""
from __future__ import annotations

import asyncio
import time

# Work of about this much between two turns of the loop; a probe or a client waiting behind a
# large request waits at most about this long per request in progress.
SLICE_S = 0.005
# Spans (or traces) handled between two looks at the clock.
CHUNK = 256


class LoopTurns:
    __slots__ = ("slice_s", "_since")

    def __init__(self, slice_s: float = SLICE_S) -> None:
        self.slice_s = slice_s
        self._since = time.perf_counter()

    def due(self) -> bool:
        """Whether this work has held the loop for its slice."""
        return time.perf_counter() - self._since >= self.slice_s

    async def give(self) -> None:
        """Lets everything else that is ready run once, then starts a new slice."""
        await asyncio.sleep(0)
        self._since = time.perf_counter()

    async def share(self) -> None:
        """`give()` when the slice is used up."""
        if self.due():
            await self.give()
