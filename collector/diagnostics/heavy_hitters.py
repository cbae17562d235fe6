"""Space-Saving (Metwally, Agrawal and El Abbadi, 2005): the most frequent keys of a stream in a
fixed number of slots.

Each slot holds a key, its count and an error. A key already held has its count raised by one; a
new key, when every slot is taken, replaces the key with the smallest count and inherits that
count (plus one) as its count and the old count as its error. With `slots` = m over a stream of N
increments:

- a held key's true count lies in [count - error, count];
- the smallest held count (the floor) is at most N / m, and any key whose true count exceeds the
  floor is held: a key that makes up more than 1/m of the stream is never lost;
- the first n keys by count are exactly the true top n (as a set) when the n-th key's lower
  bound, count - error, is at least the (n+1)-th key's count.

The slots are kept in buckets by count (the "stream summary"), so an increment, an insertion and
an eviction each cost a few dict operations, whatever m is. Among keys at the floor, the one that
has sat there longest is evicted first."""
from __future__ import annotations

from typing import Callable, Generic, Iterator, Mapping, TypeVar

T = TypeVar("T")


class Slot(Generic[T]):
    """A held key. `data` is the caller's payload, created fresh whenever the slot changes key."""

    __slots__ = ("key", "count", "error", "data")

    def __init__(self, key: str, count: int, error: int, data: T) -> None:
        self.key = key
        self.count = count
        self.error = error
        self.data = data

    @property
    def lower_bound(self) -> int:
        """The count observed since this key took the slot: its true count is at least this."""
        return self.count - self.error


class SpaceSaving(Generic[T]):
    def __init__(self, slots: int, payload: Callable[[], T]) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.capacity = slots
        self._payload = payload
        self._slots: dict[str, Slot[T]] = {}
        # count -> the slots with that count, oldest arrival first (dicts keep insertion order).
        self._buckets: dict[int, dict[str, Slot[T]]] = {}
        self._floor = 0  # smallest count held; 0 while no key is held
        self.total = 0  # N: increments seen
        self.evictions = 0

    @property
    def held(self) -> Mapping[str, Slot[T]]:
        """Key -> slot of every held key (read only; for callers that look up many keys)."""
        return self._slots

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: str) -> bool:
        return key in self._slots

    def get(self, key: str) -> Slot[T] | None:
        return self._slots.get(key)

    @property
    def floor(self) -> int:
        """Any key not held was counted at most this many times (0 until every slot is taken:
        until then every key ever counted is held)."""
        return self._floor if len(self._slots) >= self.capacity else 0

    def increment(self, key: str) -> Slot[T]:
        """Count one occurrence of `key`; returns its slot, valid until the next call (an evicted
        slot object is reused for the newcomer: hold keys, not slots)."""
        # On every irrelevant verdict: the bucket moves are written out here rather than in
        # helpers, since a call costs about as much as the dict operations themselves.
        self.total += 1
        buckets = self._buckets
        slot = self._slots.get(key)
        if slot is not None:
            old = slot.count
            bucket = buckets[old]
            del bucket[key]
            if not bucket:
                del buckets[old]
                if old == self._floor:
                    self._floor = old + 1
            slot.count = new = old + 1
            target = buckets.get(new)
            if target is None:
                buckets[new] = {key: slot}
            else:
                target[key] = slot
            return slot
        if len(self._slots) < self.capacity:
            slot = Slot(key, 1, 0, self._payload())
            self._slots[key] = slot
            self._floor = 1
            count = 1
        else:
            floor = self._floor
            bucket = buckets[floor]
            victim = next(iter(bucket))
            slot = bucket.pop(victim)
            del self._slots[victim]
            if not bucket:
                del buckets[floor]
                self._floor = floor + 1  # the newcomer lands at floor + 1, so that is the new floor
            self.evictions += 1
            # The victim's slot object is reused for the newcomer: no allocation but the payload's.
            slot.key, slot.count, slot.error, slot.data = key, floor + 1, floor, self._payload()
            self._slots[key] = slot
            count = floor + 1
        target = buckets.get(count)
        if target is None:
            buckets[count] = {key: slot}
        else:
            target[key] = slot
        return slot

    def __iter__(self) -> Iterator[Slot[T]]:
        return iter(self._slots.values())

    def top(self, n: int) -> list[Slot[T]]:
        """The n slots with the highest counts; ties go to the smaller error (the surer count)."""
        if n <= 0:
            return []
        ordered = sorted(self._slots.values(), key=lambda s: (-s.count, s.error, s.key))
        return ordered[:n]

    def exact_top(self, n: int) -> bool:
        """Whether `top(n)` is, as a set, the true top n (the guarantee above). Trivially true
        while no key was ever evicted, as every count is then exact."""
        if n <= 0 or self.evictions == 0:
            return True
        ordered = self.top(n + 1)
        if len(ordered) <= n:  # fewer slots than n: keys were lost and could belong in the top n
            return False
        # Keys not held were counted at most floor <= ordered[n].count times, so they are covered too.
        return ordered[n - 1].lower_bound >= ordered[n].count
