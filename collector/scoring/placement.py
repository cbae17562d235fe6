"""Where scoring runs: in the sidecar's own process, or in a scoring process on another core.

`--scoring-process auto` (the default) chooses the scoring process when the sidecar reads Kafka
and has at least two CPUs to run on: a Kafka consumer keeps its thread busy reading, and the
judge client's work would otherwise compete with it. For OTLP input the sidecar is usually a
small container beside the app, so it stays one process. `on` and `off` force the choice.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxprec.collector.components import Deadline
from ctxprec.collector.scoring.engine_process import ProcessEngine
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import build_engine
from ctxprec.scorer.judge.chat import RequestObserver
from ctxprec.scorer.judge.shared_cache import CacheObserver


@dataclass(frozen=True, slots=True)
class Placement:
    """What placing the engine needs to know, and what building it needs."""

    judge: JudgeConfig
    scale: float = 1.0
    process: str = "auto"  # --scoring-process: auto | on | off
    reads_kafka: bool = False  # `auto` moves scoring out of a sidecar that reads Kafka
    log_level: str = "info"  # the scoring process logs at the sidecar's level


def usable_cpus() -> float:
    """CPUs this process may use: its affinity set, capped by a cgroup CPU quota (containers)."""
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = float(os.cpu_count() or 1)
    quota = _cgroup_quota()
    return min(cpus, quota) if quota is not None else cpus


def _cgroup_quota() -> float | None:
    try:  # cgroup v2: "max 100000" or "200000 100000"
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # cgroup v1
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def use_scoring_process(placement: Placement, *, cpus: float | None = None) -> bool:
    if placement.process != "auto":
        return placement.process == "on"
    return placement.reads_kafka and (usable_cpus() if cpus is None else cpus) >= 2


def make_engine(placement: Placement, observer: RequestObserver, cache_observer: CacheObserver | None = None) -> Any:
    """The scoring engine for `ScoringWorkers`, in or out of process."""
    if use_scoring_process(placement):
        return ProcessEngine(placement.judge, scale=placement.scale, observer=observer,
                             log_level=placement.log_level, cache_observer=cache_observer)
    return build_engine(placement.judge, scale=placement.scale, observer=observer, cache_observer=cache_observer)


class EngineStage:
    """The scoring engine as a pipeline component: started (its judge client's one-time work,
    `warm_up`) before the workers that use it, closed after they finished."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def start(self) -> None:
        await self.engine.warm_up()

    async def finish(self, deadline: Deadline) -> None:
        return None

    async def close(self) -> None:
        await self.engine.aclose()
