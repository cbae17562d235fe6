"""The resolving stage, between sampling and scoring: the text of documents that a trace names
only by id, looked up in the app's own store.

    sampling (RetrievalGate) --ScoringQueue--> DocumentResolver --ScoringQueue--> scoring workers

It is the gate's scoring queue. A retrieval with text passes straight on, untouched. A sampled
retrieval whose documents carry ids and no text (the gate asks `resolvable` before it decides
`no_content`) waits for one batched lookup in the first source whose `when` matches it
(lookups.py): when every id resolves, its documents get their text, in rank order, it is marked
`documents_resolved` and goes on to scoring like any other; when any id does not, it is never
judged on a partial list (the score ranks the whole list): it is decided `unresolved`, counted
by source and reason (`missing`, `timeout`, `error`). Only sampled retrievals get here: the
unsampled path never looks anything up.

Resolved text takes the path span text takes (redacted before judging with --redact-pii, never
logged, never written back to spans). What the gate reserved for a retrieval that is then not
scored (a throttle token, a budget share) goes back to it (`ScoreCosts.unspent`, a link of the
graph). On shutdown the lookups in flight may finish by the deadline; what is left is decided
`failed`/`shutdown`, its input unacknowledged, as the workers do.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

from ctxprec.collector.assembly.specs import Condition, conditions
from ctxprec.collector.components import Deadline, Decisions, ScoreCosts, ScoringQueue
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import SHUTDOWN, Decision, Outcome, Retrieval, RetrievedContext
from ctxprec.collector.resolving.cache import TextCache
from ctxprec.collector.resolving.config import AnySource, ResolverConfig
from ctxprec.collector.resolving.lookups import SourceLookups, Waiting
from ctxprec.collector.resolving.stores import Store, StoreError

log = logging.getLogger("ctxprec.resolver")

MISSING = "missing"
_EXTRA = {"postgres": ("asyncpg", "resolve-postgres"), "redis": ("redis", "resolve-redis"),
          "chroma": ("chromadb", "resolve-chroma"), "milvus": ("pymilvus", "resolve-milvus")}


class ResolverStartError(OSError):
    """A source that cannot answer at start, with --resolver-required on (the message names it:
    `ctxprec serve: cannot start: resolver source kb (postgres): ...`)."""


class DocumentResolver:
    """The stage (module docstring): the gate's `ScoringQueue`, with the workers' behind it."""

    def __init__(self, config: ResolverConfig, *, downstream: ScoringQueue, decisions: Decisions,
                 metrics: Metrics | None = None) -> None:
        self.config = config
        self.downstream = downstream
        self.decisions = decisions
        self.costs: ScoreCosts | None = None  # the gate, told what an unscored retrieval did not spend
        self.cache = TextCache(int(config.cache_mb * 1024 * 1024), config.cache_ttl_s)
        self.sources: list[SourceLookups] = []
        self._when: list[tuple[Condition, ...]] = []
        for source in config.sources:
            secret = source.secret()  # ValueError naming the source: refused at construction
            try:
                store = build_store(source, secret)
            except StoreError as exc:
                raise ValueError(f"resolver source {source.name}: {exc}") from None
            self.sources.append(SourceLookups(source, store, secret, self.cache,
                                              max_text_chars=config.max_text_chars, done=self._looked_up,
                                              metrics=metrics))
            self._when.append(conditions(source.when))
        self.metrics = metrics
        self._unresolved = Children(metrics.resolver_unresolved) if metrics is not None else None
        self._ids = Children(metrics.resolver_ids) if metrics is not None else None
        if metrics is not None:
            metrics.resolver_cache_bytes.set_function(lambda: self.cache.bytes)
        self.closing = False

    # -- which retrievals, and where --

    def source_for(self, r: Retrieval) -> SourceLookups | None:
        """The first source whose `when` holds on the retrieval's span or resource attributes."""
        for source, when in zip(self.sources, self._when):
            if all(_holds(c, r.attributes, r.resource) for c in when):
                return source
        return None

    def resolvable(self, r: Retrieval) -> bool:
        """Documents that all carry an id and no text, and a source to look them up in (the gate
        asks before deciding `no_content`)."""
        return bool(r.textless) and all(d.id for d in r.textless) and self.source_for(r) is not None

    # -- ScoringQueue --

    def try_submit(self, r: Retrieval) -> bool:
        if r.contexts or not r.textless:  # documents with text: nothing to look up
            return self.downstream.try_submit(r)
        source = self.source_for(r)
        if source is None:  # the gate asked `resolvable` first: a retrieval no source takes is no_content
            self._decide(r, Decision.NO_CONTENT)
            return True
        if self.closing or self.waiting >= self.config.queue_size:
            return False
        waiting = Waiting(r, source.name, [d.id or "" for d in r.textless])
        for doc_id in waiting.ids:
            text = self.cache.get(source.name, doc_id)
            if text is not None:
                waiting.texts[doc_id] = text
        self._count_ids(source.name, "cached", len(waiting.texts))
        if not waiting.missing:
            return self.downstream.try_submit(self._resolved(waiting))
        source.add(waiting)
        return True

    @property
    def waiting(self) -> int:
        return sum(len(s.pending) + len(s.in_flight) for s in self.sources)

    def _looked_up(self, waiting: Waiting, reason: str | None) -> None:
        r = waiting.retrieval
        missing = waiting.missing
        if missing:
            self._unresolved_decision(waiting, reason or MISSING, len(missing))
        elif not self.downstream.try_submit(self._resolved(waiting)):
            self._decide(r, Decision.OVERLOADED)

    def _resolved(self, waiting: Waiting) -> Retrieval:
        r = waiting.retrieval
        r.contexts = [RetrievedContext(waiting.texts[d.id or ""], d.id, d.score, d.metadata, d.position)
                      for d in r.textless]
        r.textless = []
        r.documents_resolved = True
        return r

    def _unresolved_decision(self, waiting: Waiting, reason: str, missing: int) -> None:
        if self._unresolved is not None:
            self._unresolved(waiting.source, reason).inc()
        detail = f"{missing} of {len(waiting.ids)} document ids not resolved by source {waiting.source}"
        self._decide(waiting.retrieval, Decision.UNRESOLVED, (reason, detail))

    def _decide(self, r: Retrieval, decision: Decision, error: tuple[str, str] | None = None) -> None:
        if self.costs is not None:
            self.costs.unspent()
        self.decisions.emit(Outcome(r, decision, error=error))

    def _count_ids(self, source: str, outcome: str, n: int) -> None:
        if n and self._ids is not None:
            self._ids(source, outcome).inc(n)

    # -- lifecycle --

    async def start(self) -> None:
        """Opens every source; one that cannot answer stops the start (naming it), or with
        --resolver-required off is a WARNING, opened again at its first lookup."""
        for source in self.sources:
            try:
                await source.open(timeout_s=max(5.0, source.config.timeout_s))
            except StoreError as exc:
                what = f"resolver source {source.name} ({source.config.kind})"
                if self.config.required:
                    raise ResolverStartError(f"{what}: {exc}") from None
                log.warning("%s: %s; its retrievals are decided unresolved until it answers "
                            "(--resolver-required off)", what, exc)

    async def finish(self, deadline: Deadline) -> None:
        """Takes no more work; the lookups waiting or in flight may finish until the deadline
        (their retrievals go on to scoring, which finishes after this stage); what is left then is
        decided `failed`/`shutdown`."""
        self.closing = True
        while self.waiting and deadline.left() > 0:
            await asyncio.sleep(min(0.02, deadline.left()))
        left = [w for s in self.sources for w in (*s.pending, *s.in_flight)]
        for source in self.sources:
            source.pending.clear()
            await source.stop()
        for waiting in left:
            self._decide(waiting.retrieval, Decision.FAILED,
                         (SHUTDOWN, "the sidecar shut down before its documents were looked up"))

    async def close(self) -> None:
        for source in self.sources:
            await source.stop()


def build_store(config: AnySource, secret: str | None) -> Store:
    """The store of one source; StoreError when its client library is not installed."""
    library, extra = _EXTRA.get(config.kind, ("", ""))
    try:
        if config.kind == "postgres":
            from ctxprec.collector.resolving.postgres_store import PostgresStore
            return PostgresStore(config, secret)
        if config.kind == "redis":
            from ctxprec.collector.resolving.redis_store import RedisStore
            return RedisStore(config, secret)
        if config.kind == "chroma":
            from ctxprec.collector.resolving.chroma_store import ChromaStore
            return ChromaStore(config, secret)
        if config.kind == "milvus":
            from ctxprec.collector.resolving.milvus_store import MilvusStore
            return MilvusStore(config, secret)
    except ImportError:
        raise StoreError(f"the {config.kind} kind needs {library}: pip install 'ctxprec[{extra}]'") from None
    from ctxprec.collector.resolving.http_store import HttpStore
    return HttpStore(config, secret)


def _holds(condition: Condition, attributes: Mapping[str, Any], resource: Mapping[str, Any]) -> bool:
    return condition.holds("", attributes) or condition.holds("", resource)
