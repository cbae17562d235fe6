"""The offset ledger: commit only up to the lowest message not yet done."""
from __future__ import annotations

import random

import pytest
from ctxprec.collector.kafka.offsets import PartitionOffsets, SequenceTracker
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow


def test_nothing_done_nothing_to_commit() -> None:
    p = PartitionOffsets()
    for off in (10, 11, 12):
        p.track(off)
    assert p.committable is None
    assert p.pending_commit() is None
    assert p.undone == 3
    assert p.low_watermark == 10


def test_out_of_order_completion_waits_for_the_lowest() -> None:
    p = PartitionOffsets()
    for off in range(5):
        p.track(off)
    p.done(3)
    p.done(1)
    assert p.committable is None  # offset 0 still in flight
    assert p.undone == 3
    p.done(0)
    assert p.committable == 2  # 0 and 1 done, 2 not
    assert p.low_watermark == 2
    p.done(2)
    assert p.committable == 4  # 3 was already done
    p.done(4)
    assert p.committable == 5
    assert p.undone == 0 and p.in_flight == 0


def test_pending_commit_reports_only_movement() -> None:
    p = PartitionOffsets()
    p.track(7)
    p.done(7)
    assert p.pending_commit() == 8
    p.mark_committed(8)
    assert p.pending_commit() is None
    p.track(8)
    assert p.pending_commit() is None
    p.done(8)
    assert p.pending_commit() == 9


def test_duplicate_unknown_and_stale_completions_are_ignored() -> None:
    p = PartitionOffsets()
    for off in (100, 101, 105):  # gaps: compacted or transaction markers
        p.track(off)
    p.done(103)  # never handed over
    p.done(99)
    assert p.undone == 3
    p.done(101)
    p.done(101)
    assert p.undone == 2
    p.done(100)
    assert p.committable == 102
    p.done(100)  # late repeat after retirement
    assert p.committable == 102 and p.undone == 1


def test_offsets_must_increase() -> None:
    p = PartitionOffsets()
    p.track(5)
    with pytest.raises(ValueError, match="must increase"):
        p.track(5)
    p.done(5)
    with pytest.raises(ValueError, match="below the committable"):
        p.track(3)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=60), st.randoms(use_true_random=False), st.integers(0, 1000))
def test_committable_is_always_the_lowest_undone(n: int, rnd: random.Random, start: int) -> None:
    """Against a brute-force model: after any completion order, the commit point is exactly the
    first offset not done, and never passes an undone one."""
    p = PartitionOffsets()
    offsets = []
    off = start
    for _ in range(n):
        off += rnd.choice((1, 1, 2))  # gaps happen (compaction, transaction markers)
        offsets.append(off)
    for off in offsets:
        p.track(off)
    order = offsets[:]
    rnd.shuffle(order)
    done: set[int] = set()
    for off in order:
        p.done(off)
        done.add(off)
        undone = [o for o in offsets if o not in done]
        if undone:
            first = undone[0]
            prefix_done = [o for o in offsets if o < first]
            expected = prefix_done[-1] + 1 if prefix_done else None
            assert p.committable == expected
            assert p.low_watermark == first
        else:
            assert p.committable == offsets[-1] + 1
        assert p.undone == len(offsets) - len(done)


def test_sequence_tracker_waits_for_everything_issued_before_a_mark() -> None:
    seq = SequenceTracker()
    ids = [seq.issue() for _ in range(4)]
    mark = seq.issued
    assert not seq.all_done_below(mark)
    for i in (3, 1, 2):
        seq.done(ids[i])
    assert not seq.all_done_below(mark)
    seq.done(ids[0])
    assert seq.all_done_below(mark)
    later = seq.issue()
    assert seq.all_done_below(mark) and not seq.all_done_below(seq.issued)
    seq.done(later)
    assert seq.outstanding == 0
    assert SequenceTracker().all_done_below(0)
