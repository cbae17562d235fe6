"""The memory guard reads the memory the sidecar's work holds, and lets work through again once a
spike has passed: mapped files (the local judge's dictionaries) do not count, and memory Python
has freed is handed back before the guard decides to shed."""
from __future__ import annotations

import mmap
import os
from pathlib import Path

from ctxprec.collector.memory import anonymous_rss_bytes, release_freed
from ctxprec.collector.sampling.decide import RssGuard

MiB = 2**20


def resident_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_mapped_file_read_into_memory_is_not_counted(tmp_path: Path) -> None:
    path = tmp_path / "dictionary.bin"
    with path.open("wb") as f:
        for _ in range(64):
            f.write(b"d" * MiB)
    before_anon, before_rss = anonymous_rss_bytes(), resident_bytes()
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        touched = sum(mapped[i] for i in range(0, 64 * MiB, mmap.PAGESIZE))
        rss_growth, anon_growth = resident_bytes() - before_rss, anonymous_rss_bytes() - before_anon
    assert touched == ord("d") * 64 * MiB // mmap.PAGESIZE
    assert rss_growth > 48 * MiB  # the pages are resident...
    assert anon_growth < 8 * MiB  # ...but the kernel can drop and re-read them: not the work's memory


def test_memory_freed_by_python_is_handed_back_and_the_guard_lets_work_through() -> None:
    # Free pages that tests before this one left resident would take the blocks below without
    # growing the reading: hand them back first.
    release_freed()
    start = anonymous_rss_bytes()
    blocks = [bytearray(4000) for _ in range(40_000)]  # ~160 MB on the C heap, below mmap's threshold
    top = bytearray(4000)  # allocated last: the heap cannot shrink from its end by itself
    held = anonymous_rss_bytes()
    assert held - start > 120 * MiB
    guard = RssGuard(start + 60 * MiB, interval_s=0.0, release_interval_s=0.0)
    assert guard.over()
    del blocks
    assert release_freed()
    assert anonymous_rss_bytes() - start < 60 * MiB
    assert not guard.over()
    assert len(top) == 4000


class Readings:
    """A memory reading that stays high until the allocator is asked to give back."""

    def __init__(self, high: int, after_release: int) -> None:
        self.value, self.after_release, self.releases = high, after_release, 0

    def probe(self) -> int:
        return self.value

    def release(self) -> None:
        self.releases += 1
        self.value = self.after_release


def test_over_the_cap_the_guard_first_releases_then_sheds_only_what_is_still_held() -> None:
    now = [0.0]
    spike_passed = Readings(high=900, after_release=300)
    guard = RssGuard(500, interval_s=0.0, release_interval_s=5.0, clock=lambda: now[0],
                     probe=spike_passed.probe, release=spike_passed.release)
    assert not guard.over() and spike_passed.releases == 1

    still_held = Readings(high=900, after_release=900)
    guard = RssGuard(500, interval_s=0.0, release_interval_s=5.0, clock=lambda: now[0],
                     probe=still_held.probe, release=still_held.release)
    assert guard.over() and guard.over()
    assert still_held.releases == 1  # not on every submit: at most once per release interval
    now[0] += 5.0
    assert guard.over() and still_held.releases == 2
