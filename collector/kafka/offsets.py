"""At-least-once offset bookkeeping for the Kafka receiver.

A partition's messages are handed to the pipeline in offset order but finish in any order (a
sampled retrieval waits for the judge, an unsampled one is decided at once). Kafka stores one
offset per partition, meaning "everything below this is done", so the offset we may commit is
the lowest offset that is not done yet — never past a message still in flight, or a crash would
lose it.

`PartitionOffsets` is one partition's ledger for one assignment: when a partition is revoked its
ledger is dropped, and late completions of messages from that assignment land on the old object
and can no longer move the offset the new owner commits.
"""
from __future__ import annotations

from collections import deque


class PartitionOffsets:
    """Offsets of one partition that were handed over, and which of them are done."""

    __slots__ = ("_pending", "_members", "_done", "_committable", "_committed", "revoked")

    def __init__(self) -> None:
        # Offsets handed over and not yet retired, ascending (the consumer reads in order).
        self._pending: deque[int] = deque()
        self._members: set[int] = set()
        # Offsets done while an older one is still pending; retired when the front catches up.
        self._done: set[int] = set()
        self._committable: int | None = None  # offset to commit: all below it are done
        self._committed: int | None = None  # what was last committed (or found committed)
        self.revoked = False

    def track(self, offset: int) -> None:
        """Hand-over of `offset`; offsets must arrive in increasing order."""
        if self._pending and offset <= self._pending[-1]:
            raise ValueError(f"offset {offset} tracked after {self._pending[-1]}: offsets must increase")
        if not self._pending and self._committable is not None and offset < self._committable:
            raise ValueError(f"offset {offset} tracked below the committable offset {self._committable}")
        self._pending.append(offset)
        self._members.add(offset)

    def track_done(self, last: int) -> None:
        """Hand-over of a run of offsets, up to and including `last`, that were all decided at
        once (unsampled messages): one step for the whole run. Behind an offset still in flight
        the run is remembered as one done entry (its last offset), so the commit point moves past
        it only when the front catches up."""
        if self._pending:
            if last <= self._pending[-1]:
                raise ValueError(f"offset {last} tracked after {self._pending[-1]}: offsets must increase")
            self._pending.append(last)
            self._members.add(last)
            self._done.add(last)
            return
        if self._committable is not None and last < self._committable:
            raise ValueError(f"offset {last} tracked below the committable offset {self._committable}")
        self._committable = last + 1

    def done(self, offset: int) -> None:
        """`offset` reached its decision. Unknown or repeated offsets are ignored, so a late or
        duplicate completion can never move the commit point past unfinished work."""
        if offset not in self._members or offset in self._done:
            return
        if offset == self._pending[0]:
            self._pending.popleft()
            self._members.discard(offset)
            self._committable = offset + 1
            while self._pending and self._pending[0] in self._done:
                retired = self._pending.popleft()
                self._members.discard(retired)
                self._done.discard(retired)
                self._committable = retired + 1
        else:
            self._done.add(offset)

    @property
    def undone(self) -> int:
        """Messages handed over and not yet done (what back-pressure bounds)."""
        return len(self._pending) - len(self._done)

    @property
    def in_flight(self) -> int:
        """Entries held back from the commit point: the undone messages and the done ones behind
        them (a run passed to `track_done` counts as one)."""
        return len(self._pending)

    @property
    def committable(self) -> int | None:
        """The offset to commit (Kafka's "next to read"), or None when nothing is done yet."""
        return self._committable

    @property
    def low_watermark(self) -> int | None:
        """The lowest offset not yet done (what consumer lag is measured from), if known."""
        return self._pending[0] if self._pending else self._committable

    def pending_commit(self) -> int | None:
        """The committable offset if it moved since the last `mark_committed`, else None."""
        if self._committable is None or self._committable == self._committed:
            return None
        return self._committable

    def mark_committed(self, offset: int) -> None:
        if self._committed is None or offset > self._committed:
            self._committed = offset

    @property
    def committed(self) -> int | None:
        return self._committed


class SequenceTracker:
    """The same "lowest not yet done" rule over a single sequence 0, 1, 2, ... — used to know when
    every item issued before some point has finished (e.g. every result record was delivered)."""

    __slots__ = ("_next", "_ledger")

    def __init__(self) -> None:
        self._next = 0
        self._ledger = PartitionOffsets()

    def issue(self) -> int:
        seq = self._next
        self._next += 1
        self._ledger.track(seq)
        return seq

    def done(self, seq: int) -> None:
        self._ledger.done(seq)

    @property
    def issued(self) -> int:
        """How many were issued: `all_done_below(issued)` waits for everything so far."""
        return self._next

    def all_done_below(self, mark: int) -> bool:
        if mark <= 0:
            return True
        committable = self._ledger.committable
        return committable is not None and committable >= mark

    @property
    def outstanding(self) -> int:
        return self._ledger.undone
