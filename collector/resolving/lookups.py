"""One source's lookups: the retrievals waiting for it are batched (every retrieval handed over in
one turn of the event loop, such as one assembly round, goes into one lookup of their ids, up
to `max_batch` ids), at most `max_concurrency` lookups are in flight (more batches wait, and
grow meanwhile), each lookup has `timeout_s`, and a circuit breaker stops asking a source that
keeps failing until its cooldown passed (one lookup then probes it).

The store is opened lazily when it was not at start (`--resolver-required off`), so a source
that comes up later starts answering. What a lookup finds is cached (cache.py); ids already in
the cache are not asked again. Each batch's retrievals go to `done(waiting, reason)`: reason
None when the lookup ran (a retrieval may still miss ids), `timeout` or `error` when it did not.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from ctxprec.collector.components import cancelled
from ctxprec.collector.failure_log import FailureLog
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Retrieval
from ctxprec.collector.resolving.cache import TextCache
from ctxprec.collector.resolving.config import AnySource
from ctxprec.collector.resolving.stores import Store, StoreError, scrubbed
from ctxprec.scorer.judge.chat import JudgeUnavailable
from ctxprec.scorer.judge.limits import CircuitBreaker

log = logging.getLogger("ctxprec.resolver")

TIMEOUT, ERROR = "timeout", "error"


@dataclass(slots=True)
class Waiting:
    """A retrieval waiting for the texts of its documents, by id."""

    retrieval: Retrieval
    source: str  # the name of the source that looks it up
    ids: list[str]  # its documents' ids, in rank order
    texts: dict[str, str] = field(default_factory=dict)  # found so far

    @property
    def missing(self) -> list[str]:
        return [i for i in self.ids if i not in self.texts]


class SourceLookups:
    def __init__(self, config: AnySource, store: Store, secret: str | None, cache: TextCache, *,
                 max_text_chars: int, done: Callable[[Waiting, str | None], None], metrics: Metrics | None) -> None:
        self.config = config
        self.name = config.name
        self.store = store
        self._secret = secret
        self.cache = cache
        self.max_text_chars = max_text_chars
        self._done = done
        self.opened = False
        self.breaker = CircuitBreaker(config.breaker_threshold, config.breaker_cooldown_s)
        self.failures = FailureLog(f"resolver source {config.name} ({config.kind})", log)
        self.pending: deque[Waiting] = deque()
        self.in_flight: list[Waiting] = []
        self.lookups = 0
        self._scheduled = False
        self._busy = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._metrics = metrics
        if metrics is not None:
            self._lookups = Children(metrics.resolver_lookups)
            self._ids = Children(metrics.resolver_ids)
            self._latency = metrics.resolver_latency.labels(source=self.name)
            self._up = metrics.resolver_source_up.labels(source=self.name)

    # -- start and stop --

    async def open(self, timeout_s: float | None = None) -> None:
        """Connects and checks the store; StoreError, naming no address or secret, when it
        cannot answer (its half-made clients closed)."""
        try:
            await asyncio.wait_for(self.store.open(), timeout_s or self.config.timeout_s)
        except BaseException as exc:
            await self._close_store()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise StoreError(self._message(exc)) from None
        self.opened = True
        self._set_up(True)

    async def stop(self) -> None:
        await cancelled(*self._tasks)
        self._tasks.clear()
        await self._close_store()
        self.opened = False

    async def _close_store(self) -> None:
        try:
            await self.store.close()
        except Exception:  # closing a client whose store is gone
            log.debug("resolver source %s: close failed", self.name, exc_info=True)

    def _message(self, exc: BaseException) -> str:
        if isinstance(exc, StoreError):
            text = str(exc)
        elif isinstance(exc, asyncio.TimeoutError):
            text = "no answer within its timeout"
        else:  # the client library's own errors: connection refused, authentication, ...
            text = f"{type(exc).__name__}: {exc}"
        return scrubbed(text, self.config, self._secret)

    # -- lookups --

    def add(self, waiting: Waiting) -> None:
        self.pending.append(waiting)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._scheduled = False
        while self.pending and self._busy < self.config.max_concurrency:
            batch, ids = self._next_batch()
            self._busy += 1
            self.in_flight.extend(batch)
            task = asyncio.create_task(self._lookup(batch, ids), name=f"ctxprec-resolver-{self.name}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _next_batch(self) -> tuple[list[Waiting], list[str]]:
        """The waiting retrievals whose ids fit in one lookup (one at least, whatever its size)."""
        batch: list[Waiting] = []
        ids: dict[str, None] = {}
        while self.pending:
            missing = [i for i in self.pending[0].missing if i not in ids]
            if batch and len(ids) + len(missing) > self.config.max_batch:
                break
            batch.append(self.pending.popleft())
            ids.update(dict.fromkeys(missing))
        return batch, list(ids)

    async def _lookup(self, batch: list[Waiting], ids: list[str]) -> None:
        try:
            reason, found = await self._fetch(ids)
        finally:
            self._busy -= 1
            for waiting in batch:
                self.in_flight.remove(waiting)
            if self.pending:
                self._dispatch()
        for waiting in batch:
            for doc_id in waiting.missing:
                text = found.get(doc_id)
                if text is None:
                    text = self.cache.get(self.name, doc_id)
                if text is not None:
                    waiting.texts[doc_id] = text
            self._done(waiting, reason)

    async def _fetch(self, ids: list[str]) -> tuple[str | None, dict[str, str]]:
        """The texts of `ids` the cache does not hold (by now), in one lookup; with the reason
        the lookup could not answer (timeout, error), or None."""
        ids = [i for i in ids if self.cache.get(self.name, i) is None]
        if not ids:
            return None, {}
        try:
            self.breaker.before_call(f"resolver source {self.name}")
        except JudgeUnavailable:
            self._count_lookup("breaker_open", len(ids))
            return ERROR, {}
        started = time.monotonic()
        try:
            found = await asyncio.wait_for(self._open_and_fetch(ids), self.config.timeout_s)
        except asyncio.CancelledError:
            self.breaker.release_probe()
            raise
        except Exception as exc:  # never raised further: its retrievals are decided unresolved
            reason = TIMEOUT if isinstance(exc, asyncio.TimeoutError) else ERROR
            self.breaker.record_failure()
            self._set_up(False)
            self.failures.failed(f"lookup {reason}", self._message(exc))
            self._count_lookup(reason, len(ids))
            return reason, {}
        self.breaker.record_success()
        self._set_up(True)
        if self._metrics is not None:
            self._latency.observe(time.monotonic() - started)
        self._count_lookup("ok")
        limit = self.max_text_chars
        texts = {doc_id: found[doc_id][:limit] for doc_id in ids if doc_id in found}
        for doc_id, text in texts.items():
            self.cache.put(self.name, doc_id, text)
        self._count_ids("found", len(texts))
        self._count_ids("missing", len(ids) - len(texts))
        return None, texts

    async def _open_and_fetch(self, ids: list[str]) -> dict[str, str]:
        if not self.opened:  # not at start (--resolver-required off), or it went away: try now
            await self.open()
        return await self.store.fetch(ids)

    # -- metrics --

    def _count_lookup(self, outcome: str, failed_ids: int = 0) -> None:
        self.lookups += 1
        if self._metrics is not None:
            self._lookups(self.name, outcome).inc()
        if failed_ids:
            self._count_ids("failed", failed_ids)
        if outcome == "breaker_open":
            self._set_up(False)

    def _count_ids(self, outcome: str, n: int) -> None:
        if n and self._metrics is not None:
            self._ids(self.name, outcome).inc(n)

    def _set_up(self, up: bool) -> None:
        if self._metrics is not None:
            self._up.set(1 if up else 0)
