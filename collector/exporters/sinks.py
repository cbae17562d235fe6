"""The result sinks `--sink KIND=URL` configures: each score written into a backend's own store
(Phoenix annotations, Langfuse scores), beside the span write-back.

A `BackendSink` is a `ResultSink`: `emit` turns an outcome into the backend's item (or nothing,
for an outcome that writes nothing) and offers it to its `SinkQueue`, which sends in the
background. Emitting never waits for the network and never raises.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ctxprec.collector.components import Deadline
from ctxprec.collector.exporters.config import ExportConfig, SinkTarget
from ctxprec.collector.exporters.sink_queue import QueueSettings, SinkQueue
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Outcome
from ctxprec.collector.scoring.identity import ScorerIdentity

log = logging.getLogger(__name__)

PHOENIX_API_KEY = "PHOENIX_API_KEY"


@dataclass(frozen=True, slots=True)
class SinkSettings:
    """The result sinks: which backends, the score label's threshold, and each sink's queue."""

    targets: tuple[SinkTarget, ...]
    threshold: float
    max_queue: int  # scores waiting per sink
    deadline_s: float  # longest a score waits to reach its backend

    @classmethod
    def of(cls, export: ExportConfig) -> "SinkSettings":
        return cls(export.sinks, export.threshold, export.sink_max_queue, export.sink_deadline_s)


class BackendSink:
    def __init__(self, target: SinkTarget, queue: SinkQueue[Any], item_of: Callable[[Outcome], Any | None]) -> None:
        self.target = target
        self.queue = queue
        self._item_of = item_of

    @property
    def name(self) -> str:
        return self.queue.exporter

    def emit(self, outcome: Outcome) -> None:
        if not outcome.scored:
            return
        try:
            item = self._item_of(outcome)
        except Exception:  # a result we cannot express must not cost the other sinks theirs
            log.exception("%s sink: could not build the item of trace %s span %s", self.target.kind,
                          outcome.retrieval.trace_id, outcome.retrieval.span_id)
            return
        if item is not None:
            self.queue.offer(item)

    async def start(self) -> None:
        await self.queue.start()

    async def finish(self, deadline: Deadline) -> None:
        await self.queue.finish(deadline)

    async def close(self) -> None:
        await self.queue.close()


def build_sinks(settings: SinkSettings, identity: ScorerIdentity, metrics: Metrics, *,
                environ: Mapping[str, str] | None = None) -> list[BackendSink]:
    """One sink per target. Raises ValueError for a sink that cannot work (Langfuse keys missing,
    its SDK not installed), so that the start fails with the reason."""
    env = os.environ if environ is None else environ
    names: dict[str, int] = {}
    sinks: list[BackendSink] = []
    for target in settings.targets:
        # Two sinks of one kind get their own counter labels: phoenix, phoenix_2, ...
        names[target.kind] = names.get(target.kind, 0) + 1
        exporter = target.kind if names[target.kind] == 1 else f"{target.kind}_{names[target.kind]}"
        sinks.append(_build(target, exporter, settings, identity, metrics, env))
    return sinks


def _build(target: SinkTarget, exporter: str, settings: SinkSettings, identity: ScorerIdentity, metrics: Metrics,
           env: Mapping[str, str]) -> BackendSink:
    what = f"{target.kind} sink {target.url}"
    if target.kind == "phoenix":
        from ctxprec.collector.exporters.phoenix_annotations import (
            PhoenixAnnotations,
            annotations_of,
        )

        phoenix = PhoenixAnnotations(target.url, api_key=env.get(PHOENIX_API_KEY) or None)
        # The linger gives a span forwarded at the same moment time to be stored by Phoenix, and
        # fills the batches: Phoenix's synchronous inserts take long, per request more than per item.
        queue: SinkQueue[Any] = SinkQueue(phoenix, exporter=exporter, what=what, metrics=metrics, settings=QueueSettings(
            max_items=settings.max_queue, deadline_s=settings.deadline_s, linger_s=1.0))
        return BackendSink(target, queue, lambda o: annotations_of(o, identity, threshold=settings.threshold))
    if target.kind == "langfuse":
        from ctxprec.collector.exporters.langfuse_scores import (
            ENVIRONMENT,
            LangfuseKeys,
            LangfuseScores,
        )

        langfuse = LangfuseScores(target.url, identity, keys=LangfuseKeys.from_env(env), threshold=settings.threshold,
                                  environment=env.get(ENVIRONMENT) or None)
        queue = SinkQueue(langfuse, exporter=exporter, what=what, metrics=metrics, settings=QueueSettings(
            max_items=settings.max_queue, deadline_s=settings.deadline_s, max_batch=50, linger_s=0.2))
        return BackendSink(target, queue, langfuse.score_of)
    raise ValueError(f"unknown sink kind {target.kind!r}")
