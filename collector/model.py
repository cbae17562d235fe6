"""Data that flows through the sidecar pipeline: receivers -> assembly -> sampling -> scoring ->
exporters. Plain dataclasses; each stage adds what it knows."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ctxprec.scorer.result import ScoreResult, Verdict


# The error type of a retrieval that shutdown cut short: decided `failed`, its input not
# acknowledged (a Kafka message is read again after a restart and scored then).
SHUTDOWN = "shutdown"
# The convention of a retrieval read from a RAG event: no span came before it, so the head
# sampling decision for its trace is taken when sampling first sees it.
RAG_EVENT = "rag_event"


class Decision(str, enum.Enum):
    """Every retrieval ends in exactly one of these (`ctxprec_samples_total{decision}`)."""

    EVALUATED = "evaluated"
    NOT_SAMPLED = "not_sampled"
    FILTERED = "filtered"
    THROTTLED = "throttled"
    OVER_BUDGET = "over_budget"
    OVERLOADED = "overloaded"
    NO_CONTEXTS = "no_contexts"
    NO_CONTENT = "no_content"  # documents that carry no text (content capture off)
    UNRESOLVED = "unresolved"  # documents known by id whose text a resolver could not all look up
    DUPLICATE = "duplicate"
    FAILED = "failed"


@dataclass(slots=True)
class RetrievedContext:
    content: str
    id: str | None = None
    score: float | None = None
    metadata: dict[str, Any] | None = None
    # Its index in the span's own numbered list (OpenInference `retrieval.documents.{i}`), which
    # backends address documents by; None where the convention does not number them.
    position: int | None = None


@dataclass(slots=True)
class Retrieval:
    """One retrieval to score, whatever it was read from (a span, a rag_event)."""

    trace_id: str  # 32 lowercase hex
    span_id: str  # 16 lowercase hex
    service: str
    query: str
    contexts: list[RetrievedContext]
    retriever: str = ""
    output: str | None = None
    expected_output: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    end_time_unix_nano: int = 0  # when the retrieval ended (for score delay); 0 if unknown
    # A built-in convention (openinference, genai, openllmetry, mastra), mapping, the name of a
    # conventions.mappings entry, or RAG_EVENT.
    convention: str = ""
    # Where `output` came from: llm_span | chain_output | event | none (ctxprec.answer_source).
    answer_source: str = "none"
    # False when the answer was read from a value of unknown shape and used as it stood.
    answer_clean: bool = True
    # The resource of the span the retrieval was read from (evaluator spans are filed under it).
    resource: dict[str, Any] = field(default_factory=dict)
    # Documents that carry an id or a score but no text (decided `no_content` when no context has text).
    documents_without_text: int = 0
    # Those documents in rank order, each with its id, score and position and no content: what a
    # resolver (collector/resolving/) looks up by id, turning them into `contexts`.
    textless: list[RetrievedContext] = field(default_factory=list)
    # True once a resolver gave every document its text (`ctxprec.documents_resolved`).
    documents_resolved: bool = False
    sample_rate: float = 1.0  # set by sampling
    # The input this retrieval came from, released once when the retrieval has its decision (a
    # Kafka message's offset, a trace's batch of messages); None when nothing waits on it.
    ack: "Ack | None" = None


@dataclass(slots=True)
class HeldSpan:
    """A retrieval span to hold back, as assembly found it in a request."""

    trace_id: bytes
    span_id: bytes
    span: Any  # the request's opentelemetry.proto.trace.v1.Span
    scope_spans: Any  # the request's ScopeSpans holding it
    resource_spans: Any  # the request's ResourceSpans holding it
    resent: bool = False  # a copy of a span already buffered (an exporter's retry)


class Ack(Protocol):
    def release(self) -> None: ...


@dataclass(slots=True)
class Outcome:
    """A retrieval's one decision, as it leaves sampling or scoring for the result sinks.
    `result` and `record` are set for `evaluated`; `error` and `record` for `failed`; the other
    decisions (not scored) carry the retrieval alone."""

    retrieval: Retrieval
    decision: Decision
    result: ScoreResult | None = None
    error: tuple[str, str] | None = None  # (type, message)
    record: dict[str, Any] | None = None  # the score record
    scored_at: float = field(default_factory=time.time)  # unix seconds

    @property
    def scored(self) -> bool:
        """Evaluated or failed: the judge was asked, there is a record to write."""
        return self.record is not None

    @property
    def cut_short(self) -> bool:
        """Decided `failed` because the sidecar shut down: the input stays unacknowledged."""
        return self.decision is Decision.FAILED and self.error is not None and self.error[0] == SHUTDOWN


@dataclass(slots=True)
class PeerScore:
    """A score another replica made, read back from the Kafka results topic (collector/cluster/):
    what this replica's drift detector, adaptive sampling and diagnostics learn from. Never
    counted in metrics or exported again: the replica that made it did that."""

    service: str
    retriever: str
    score: float  # normalised to 0..1
    verdicts: list[Verdict]
    documents: list[str]  # one identity per context, in rank order
    context_chars: list[int]  # each context's size in characters, in rank order ([] when unknown)
    # The drift-slice attributes' values the retrieval carried (span, else resource), by name.
    slices: dict[str, Any] = field(default_factory=dict)


class Countdown:
    """Releases a set of acks once `n` retrievals have released it (a trace's retrievals share the
    acks of the messages that brought its spans)."""

    __slots__ = ("remaining", "acks")

    def __init__(self, n: int, acks: list[Ack]) -> None:
        self.remaining = n
        self.acks = acks
        if n <= 0:
            self._release_all()

    def release(self) -> None:
        self.remaining -= 1
        if self.remaining == 0:
            self._release_all()

    def _release_all(self) -> None:
        for ack in self.acks:
            ack.release()


class PendingAck:
    """Counts units of work still open for one input message (e.g. one Kafka record).

    The receiver creates it, the pipeline `hold()`s once per retrieval or buffered trace it takes
    on and `release()`s when that unit reaches a decision; the receiver calls `seal()` once it has
    handed over everything. `done` becomes true when sealed and nothing is held."""

    __slots__ = ("_held", "_sealed", "_callback", "_fired")

    def __init__(self, callback: Callable[[], None] | None = None) -> None:
        self._held = 0
        self._sealed = False
        self._callback = callback
        self._fired = False

    def hold(self, n: int = 1) -> None:
        self._held += n

    def release(self, n: int = 1) -> None:
        self._held -= n
        self._maybe_fire()

    def seal(self) -> None:
        self._sealed = True
        self._maybe_fire()

    @property
    def done(self) -> bool:
        return self._sealed and self._held <= 0

    def _maybe_fire(self) -> None:
        if self.done and not self._fired:
            self._fired = True
            if self._callback is not None:
                self._callback()
