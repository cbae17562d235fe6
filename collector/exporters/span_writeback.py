"""`span` write-back: every received span goes on downstream; a sampled trace's retrieval spans
wait here for their results and go out with the score attributes.

Ended spans cannot change, so the only way to put a score on the retrieval span itself is to be
on the path: assembly passes every request through (`pass_through`), the bytes of unsampled
traffic untouched, and names the retrieval spans of sampled traces to hold. Each held span leaves
exactly once: with the score (or failure) attributes when its outcome arrives (`emit`, a
`ResultSink`), unscored when the outcome is a decision without a score (throttled, duplicate,
...), when its trace turned out to hold no retrieval there (`trace_done`), or at the hold
deadline (`ctxprec_exported_spans_total{exporter="span_hold",outcome=scored|unscored|expired}`).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from ctxprec.collector.components import Deadline, cancelled
from ctxprec.collector.exporters.attributes import outcome_attributes
from ctxprec.collector.exporters.otlp_sender import OtlpSender
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import HeldSpan, Outcome
from ctxprec.collector.otlp.values import set_attributes
from ctxprec.collector.otlp.wire import remove_spans
from ctxprec.collector.scoring.identity import ScorerIdentity
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

log = logging.getLogger(__name__)

HOLD_EXPORTER = "span_hold"
# At shutdown the spans released last (unscored, or with the last scores) get this long past the
# deadline to be sent.
SENDER_GRACE_S = 1.0


@dataclass(slots=True)
class _Waiting:
    request: ExportTraceServiceRequest  # the span alone, with its resource and scope
    span: Span
    deadline: float
    copies: int = 1  # received this often (an exporter's retry): forwarded as often


class SpanWriteBack:
    def __init__(self, sender: OtlpSender, identity: ScorerIdentity, *, metrics: Metrics, threshold: float = 0.5,
                 hold_deadline_s: float = 60.0, check_interval_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if hold_deadline_s <= 0:
            raise ValueError(f"hold_deadline_s: must be positive, got {hold_deadline_s}")
        self.sender = sender
        self.identity = identity
        self.threshold = threshold
        self.hold_deadline_s = hold_deadline_s
        self._metrics = metrics
        self._clock = clock
        self._check_interval_s = check_interval_s
        self._held: OrderedDict[tuple[bytes, bytes], _Waiting] = OrderedDict()
        self._by_trace: dict[bytes, list[bytes]] = {}
        self._task: asyncio.Task[None] | None = None
        self._released = {name: metrics.exported_spans.labels(exporter=HOLD_EXPORTER, outcome=name)
                          for name in ("scored", "unscored", "expired")}

    @property
    def held_count(self) -> int:
        return len(self._held)

    # -- from assembly --

    def pass_through(self, request: ExportTraceServiceRequest, raw: bytes | None, total_spans: int,
                     held: list[HeldSpan]) -> None:
        """Sends the request on without the `held` spans, which wait for their results. `raw` is
        the request's protobuf encoding when the caller has it (sent as it is when nothing is
        held). `request` may lose the held spans (only when they cannot be cut from the bytes)."""
        # A re-sent retrieval span whose first copy still waits goes out with it, scored alike; one
        # whose first copy left already goes on now (its retrieval is decided once, with that copy).
        held = [item for item in held if not item.resent or (item.trace_id, item.span_id) in self._held]
        if total_spans == len(held) and held:
            self._hold_all(held)
            return
        data = raw if raw is not None else request.SerializeToString()
        if held:
            copies = self._hold_all(held)
            cut = remove_spans(data, copies)
            if cut is None:  # not found verbatim (a non-canonical encoder): re-encode without them
                _delete_from_request(held)
                cut = request.SerializeToString()
            data = cut
        self.sender.forward_raw(data, total_spans - len(held))

    def trace_done(self, trace_id: bytes, retrieval_span_ids: set[bytes]) -> None:
        """Assembly read the trace: held spans that are not among its retrievals go on unscored."""
        for span_id in self._by_trace.pop(trace_id, ()):
            if span_id not in retrieval_span_ids:
                self._release((trace_id, span_id), None)

    def nest_done(self, trace_id: bytes, span_ids: set[bytes]) -> None:
        """Spans of decided nests that are not retrievals of their own go on unscored."""
        for span_id in span_ids:
            self._release((trace_id, span_id), None)

    def _hold_all(self, held: list[HeldSpan]) -> list[bytes]:
        deadline = self._clock() + self.hold_deadline_s
        encoded: list[bytes] = []
        for item in held:
            key = (item.trace_id, item.span_id)
            waiting = self._held.get(key)
            if waiting is not None and item.resent:
                waiting.copies += 1
                encoded.append(item.span.SerializeToString())
                continue
            request = ExportTraceServiceRequest()
            rs = request.resource_spans.add()
            rs.resource.CopyFrom(item.resource_spans.resource if item.resource_spans is not None else Resource())
            rs.schema_url = item.resource_spans.schema_url if item.resource_spans is not None else ""
            ss = rs.scope_spans.add()
            ss.scope.CopyFrom(item.scope_spans.scope if item.scope_spans is not None else InstrumentationScope())
            ss.schema_url = item.scope_spans.schema_url if item.scope_spans is not None else ""
            span = ss.spans.add()
            span.CopyFrom(item.span)
            self._held[key] = _Waiting(request, span, deadline)
            self._by_trace.setdefault(item.trace_id, []).append(item.span_id)
            encoded.append(span.SerializeToString())
        return encoded

    # -- ResultSink --

    def emit(self, outcome: Outcome) -> None:
        r = outcome.retrieval
        try:
            key = (bytes.fromhex(r.trace_id), bytes.fromhex(r.span_id))
        except ValueError:
            return
        if key not in self._held:
            return
        self._release(key, outcome_attributes(outcome, self.identity, threshold=self.threshold))

    def _release(self, key: tuple[bytes, bytes], attributes: dict[str, Any] | None) -> bool:
        waiting = self._held.pop(key, None)
        if waiting is None:
            return False
        if attributes:
            set_attributes(waiting.span, attributes)
        data = waiting.request.SerializeToString()
        for _ in range(waiting.copies):
            self.sender.forward_raw(data, 1)
        scored = attributes is not None and "gen_ai.evaluation.score.value" in attributes
        self._released["scored" if scored else "unscored"].inc(waiting.copies)
        return True

    # -- deadlines and lifecycle --

    def expire(self, *, force: bool = False) -> int:
        """Sends the spans whose hold deadline passed (all of them with `force`)."""
        now = self._clock()
        sent = 0
        while self._held:
            key, waiting = next(iter(self._held.items()))
            if not force and waiting.deadline > now:
                break
            del self._held[key]
            data = waiting.request.SerializeToString()
            for _ in range(waiting.copies):
                self.sender.forward_raw(data, 1)
            self._released["expired"].inc(waiting.copies)
            sent += waiting.copies
        return sent

    async def start(self) -> None:
        await self.sender.start()
        if self._task is None:
            self._task = asyncio.create_task(self._expiry_loop(), name="span-writeback-expiry")

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(self._check_interval_s)
            self.expire()

    async def finish(self, deadline: Deadline) -> None:
        """Waits until `deadline` for held spans to get their results, sends the rest unscored,
        then flushes the sender, which gets a moment more for what was queued last."""
        while self._held and deadline.left() > 0:
            await asyncio.sleep(0.02)
        await cancelled(self._task)
        self._task = None
        self.expire(force=True)
        self._by_trace.clear()
        await self.sender.finish(Deadline.after(deadline.left() + SENDER_GRACE_S))

    async def close(self) -> None:
        await self.sender.close()


def _delete_from_request(held: list[HeldSpan]) -> None:
    by_scope: dict[int, tuple[Any, set[bytes]]] = {}
    for item in held:
        by_scope.setdefault(id(item.scope_spans), (item.scope_spans, set()))[1].add(item.span_id)
    for scope_spans, span_ids in by_scope.values():
        spans = scope_spans.spans
        for index in range(len(spans) - 1, -1, -1):
            if spans[index].span_id in span_ids:
                del spans[index]
