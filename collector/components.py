"""The contracts every part of the sidecar keeps, each declared here once: the lifecycle of a
component, and the seams between the stages, in the order data crosses them:

    receivers --TraceConsumer--> assembly --RetrievalSink--> sampling --ScoringQueue--> scoring
              --ResultSink--> exporters (metrics, span write-back, evaluator spans, Kafka results, ...)

and, with document resolvers, sampling --ScoringQueue--> resolving --ScoringQueue--> scoring (the
text of documents traces name only by id, looked up in the app's store);

and, in span mode, assembly --SpanPassThrough--> the span write-back exporter (every span goes
downstream; the retrieval spans of sampled traces wait there for their results); OTLP logs and
metrics receivers --SignalConsumer--> assembly --SignalPassThrough--> the forwarder; with cluster
learning, the cluster feed --PeerScores--> the drift monitor and the diagnostics (the scores
other replicas made, read back from the Kafka results topic).

Data only moves forward across these interfaces: no stage calls back into the one before it. A
retrieval's input acknowledgement (`model.Ack`: a Kafka offset) travels with it and is released
by the last stage. The stages and the links between them are declared in one place, the
composition root (pipeline.py, over service_graph.py); nothing else wires stages together.

The lifecycle is the OpenTelemetry Collector's, with its shutdown in two phases so that a
pipeline can empty itself before anything closes:

1. `start()`: consumers are started before the producers that feed them.
2. `finish(deadline)`: take no new work, and finish what is in flight by `deadline` (what cannot
   be finished by then is decided or dropped, never left hanging). Producers finish before their
   consumers, so that each stage's last input has arrived when it is asked to finish.
3. `close()`: release what is held (sockets, clients, tasks), once every stage has finished.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ctxprec.collector.model import Decision, Outcome, PeerScore, PendingAck, Retrieval


@dataclass(frozen=True, slots=True)
class Deadline:
    """A point in time (monotonic clock) by which work in flight must be finished."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        return cls(time.monotonic() + max(0.0, seconds))

    def left(self) -> float:
        """Seconds until the deadline, never negative."""
        return max(0.0, self.at - time.monotonic())

    def later(self, seconds: float) -> "Deadline":
        """A deadline `seconds` after this one (a part allowed a moment past the shared one)."""
        return Deadline(self.at + seconds)


@runtime_checkable
class Component(Protocol):
    """Something with a lifetime in the pipeline (see the module docstring for the phases)."""

    async def start(self) -> None: ...

    async def finish(self, deadline: Deadline) -> None: ...

    async def close(self) -> None: ...


class Stateless:
    """The lifecycle of a stage that holds nothing between calls (the result fan-out, the
    metrics sink): nothing to start, finish or close."""

    async def start(self) -> None:
        return None

    async def finish(self, deadline: Deadline) -> None:
        return None

    async def close(self) -> None:
        return None


async def shutdown(component: Component, timeout_s: float) -> None:
    """Both stop phases of one component used on its own (tests, tools): finish within
    `timeout_s`, then close."""
    try:
        await component.finish(Deadline.after(timeout_s))
    finally:
        await component.close()


async def cancelled(*tasks: "asyncio.Task[Any] | None") -> None:
    """Cancels a component's background tasks and waits until they have ended (what they raise
    on the way out is theirs, already logged: a stop does not fail for it)."""
    running = [task for task in tasks if task is not None]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


class TraceConsumer(Protocol):
    """Takes decoded OTLP trace requests (receivers -> assembly). `raw` is the request's
    uncompressed protobuf encoding when the receiver has it; `ack` is held by each trace taken on
    until its retrievals are decided."""

    async def ingest(self, request: Any, *, receiver: str, raw: bytes | None = None,
                     ack: PendingAck | None = None) -> None: ...


class SignalConsumer(Protocol):
    """Takes decoded OTLP logs and metrics requests (receivers -> assembly): counted, read where
    they tell about a sampled trace (GenAI event logs), and passed on. `signal` is `logs` or
    `metrics` (collector/otlp/signals.py); `raw` as for `TraceConsumer`."""

    async def ingest_signal(self, signal: str, request: Any, *, receiver: str, raw: bytes | None = None) -> None: ...


class RetrievalSink(Protocol):
    """Takes retrievals to decide on (assembly and the Kafka event receiver -> sampling). Never
    blocks: it runs on the receivers' path."""

    def submit(self, retrieval: Retrieval) -> None: ...

    def not_sampled(self, service: str, count: int) -> None: ...


class ScoringQueue(Protocol):
    """Where sampling queues a retrieval for scoring (sampling -> scoring); False when it is full
    (the overload signal). Never waits."""

    def try_submit(self, retrieval: Retrieval) -> bool: ...


class Decisions(Protocol):
    """Where sampling's decisions go (exporters/fanout.ResultFanout): outcomes, and bulk counts of
    retrievals that were never read (unsampled spans)."""

    def emit(self, outcome: Outcome) -> None: ...

    def count(self, service: str, decision: Decision, n: int = 1) -> None: ...


class ScoreCosts(Protocol):
    """What each retrieval taken from the queue cost once scored or failed (scoring -> sampling,
    a feedback link; also resolving -> sampling): the daily budget the gate keeps turns the
    reservation into spend."""

    def settled(self, cost_usd: float) -> None: ...

    def unspent(self) -> None:
        """A retrieval queued for scoring was decided without a judge call (the resolver's
        `unresolved`, or `overloaded` once its documents were looked up): what was reserved for
        it is given back."""


class ResultSink(Protocol):
    """Takes every retrieval's one decision, scored or not (sampling and scoring -> exporters).
    Must not block and must not raise."""

    def emit(self, outcome: Outcome) -> None: ...


class SpanPassThrough(Protocol):
    """Span mode (assembly -> span write-back): every received request goes downstream; the
    listed retrieval spans are held back until their results come."""

    def pass_through(self, request: Any, raw: bytes | None, total_spans: int, held: list[Any]) -> None: ...

    def trace_done(self, trace_id: bytes, retrieval_span_ids: set[bytes]) -> None: ...

    def nest_done(self, trace_id: bytes, span_ids: set[bytes]) -> None: ...


class SignalPassThrough(Protocol):
    """OTLP logs and metrics on their way downstream (assembly -> the forwarder): the serialized
    export request as it came and how many items (log records, data points) it holds. Never
    blocks, never raises: what cannot go on is dropped and counted."""

    def pass_signal(self, signal: str, data: bytes, items: int) -> None: ...


class PeerScores(Protocol):
    """Takes the scores other replicas made (the cluster feed -> the drift monitor and the
    diagnostics), to learn from: never counted in metrics, never exported. Must not block and
    must not raise."""

    def peer_score(self, score: PeerScore) -> None: ...
