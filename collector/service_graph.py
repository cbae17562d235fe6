"""The pipeline as data: its stages, the edges data flows along, and the named feedback links,
from which start order, stop order and readiness are derived (as the OpenTelemetry Collector's
service graph does).

- A **stage** is a `components.Component` under a name, optionally with a readiness check
  (`/readyz`) and a grace: how long past the shared shutdown deadline it may take to finish
  (exporters get a moment for what the last decisions handed them).
- An **edge** `source -> target` says that `source` hands work to `target` across a seam (named
  after its `components` Protocol), or, for edges that carry no data, that `target` must outlive
  `source` (the span forwarder before the result sinks: an annotation needs its span stored).
  Edges must not form a cycle.
- A **link** is a feedback path against the flow (drift -> adaptive sampling, results flushed
  before a Kafka commit, the ack travelling with a retrieval back to its input). Links are named
  so that the whole wiring reads in one place; they never order start or stop.
- An **extension** (the metrics server, as in the Collector) is outside the flow: it starts after
  every stage (its port answering means the sidecar is up) and stops after every stage (scrapes
  and probes see the shutdown to its end).

Start: consumers before producers (nothing is accepted before it can be handled). Stop, in two
phases over the same order reversed: every stage `finish`es, producers before consumers and the
stages of one wave (the same longest distance from an input) side by side, so that each stage
finishes after its last input arrived; then every stage `close`s in the same order. A stage that
fails to start stops the ones already started; one that fails to stop is logged and the rest
stop all the same.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable

from ctxprec.collector.components import Component, Deadline

log = logging.getLogger(__name__)

ReadyCheck = Callable[[], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Readiness:
    """A `/readyz` check: `name` is what a failing check is reported as."""

    name: str
    check: ReadyCheck


@dataclass(slots=True)
class Stage:
    name: str
    component: Component
    ready: Readiness | None = None
    grace_s: float = 0.0
    extension: bool = False


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    seam: str  # what crosses it: a `components` Protocol's name, or why `target` outlives `source`


@dataclass(frozen=True, slots=True)
class Link:
    source: str
    target: str
    what: str


@dataclass
class ServiceGraph:
    stages: dict[str, Stage] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    _started: list[Stage] = field(default_factory=list, repr=False)

    # -- declaring --

    def add(self, name: str, component: Component, *, ready: Readiness | None = None,
            grace_s: float = 0.0, extension: bool = False) -> None:
        if name in self.stages:
            raise ValueError(f"stage {name!r} is declared twice")
        self.stages[name] = Stage(name, component, ready, grace_s, extension)

    def connect(self, source: str, target: str, seam: str) -> None:
        for name in (source, target):
            if name not in self.stages:
                raise ValueError(f"edge {source} -> {target}: no stage {name!r}")
            if self.stages[name].extension:
                raise ValueError(f"edge {source} -> {target}: {name} is an extension, outside the flow")
        self.edges.append(Edge(source, target, seam))

    def link(self, source: str, target: str, what: str, wire: Callable[[], None] | None = None) -> None:
        """A feedback link, wired here by `wire` (None when it travels with the data)."""
        for name in (source, target):
            if name not in self.stages:
                raise ValueError(f"link {source} -> {target}: no stage {name!r}")
        self.links.append(Link(source, target, what))
        if wire is not None:
            wire()

    def has(self, name: str) -> bool:
        return name in self.stages

    # -- derived --

    def waves(self) -> list[list[Stage]]:
        """Stages by their longest distance from an input, inputs first (the stop order); within
        a wave in declaration order; the extensions last, as a wave of their own. Raises
        ValueError on a cycle."""
        flow = {name: stage for name, stage in self.stages.items() if not stage.extension}
        into: dict[str, set[str]] = {name: set() for name in flow}
        out: dict[str, list[str]] = {name: [] for name in flow}
        for edge in self.edges:
            if edge.source not in into[edge.target]:
                into[edge.target].add(edge.source)
                out[edge.source].append(edge.target)
        depth: dict[str, int] = {}
        waiting = {name: len(sources) for name, sources in into.items()}
        ready = [name for name, n in waiting.items() if n == 0]
        for name in ready:
            depth[name] = 0
        while ready:
            name = ready.pop(0)
            for target in out[name]:
                depth[target] = max(depth.get(target, 0), depth[name] + 1)
                waiting[target] -= 1
                if waiting[target] == 0:
                    ready.append(target)
        if len(depth) < len(flow):
            raise ValueError(f"the pipeline's edges form a cycle through {sorted(set(flow) - set(depth))}")
        waves: list[list[Stage]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for name, stage in flow.items():
            waves[depth[name]].append(stage)
        extensions = [stage for stage in self.stages.values() if stage.extension]
        return waves + ([extensions] if extensions else [])

    def start_order(self) -> list[Stage]:
        """Consumers before producers, then the extensions."""
        waves = self.waves()
        flow = waves[:-1] if waves and waves[-1][0].extension else waves
        return [stage for wave in reversed(flow) for stage in wave] + [s for s in self.stages.values() if s.extension]

    def readiness(self) -> list[Readiness]:
        return [stage.ready for stage in self.stages.values() if stage.ready is not None]

    def describe(self) -> list[str]:
        """One line per edge and link, for the docs and for a reader in a debugger."""
        return ([f"{e.source} -> {e.target} ({e.seam})" for e in self.edges]
                + [f"{k.source} ~> {k.target} ({k.what})" for k in self.links])

    # -- running --

    async def start(self) -> None:
        order = self.start_order()
        try:
            for stage in order:
                self._started.append(stage)  # a start that fails half way is stopped too
                await stage.component.start()
        except BaseException:
            await self.stop(Deadline.after(0.0))
            raise

    async def stop(self, deadline: Deadline) -> None:
        """Both phases over the stages started so far (all of them after a good start)."""
        started = {id(stage) for stage in self._started}
        waves = [[s for s in wave if id(s) in started] for wave in self.waves()]
        for wave in waves:
            await _side_by_side((stage, stage.component.finish(deadline.later(stage.grace_s))) for stage in wave)
        for wave in waves:
            await _side_by_side((stage, stage.component.close()) for stage in wave)
        self._started = []


async def _side_by_side(calls: Iterable[tuple[Stage, Awaitable[None]]]) -> None:
    async def quietly(stage: Stage, call: Awaitable[None]) -> None:
        try:
            await call
        except Exception:
            log.exception("error while stopping %s", stage.name)

    await asyncio.gather(*(quietly(stage, call) for stage, call in calls))
