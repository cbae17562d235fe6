"""Data that flows through the sidecar pipeline: receivers -> assembly -> sampling -> scoring ->
exporters. Plain dataclasses; each stage adds what it knows."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable


class Decision(str, enum.Enum):
    """Every retrieval ends in exactly one of these (`ctxprec_samples_total{decision}`)."""

    EVALUATED = "evaluated"
    NOT_SAMPLED = "not_sampled"
    FILTERED = "filtered"
    THROTTLED = "throttled"
    OVER_BUDGET = "over_budget"
    OVERLOADED = "overloaded"
    NO_CONTEXTS = "no_contexts"
    DUPLICATE = "duplicate"
    FAILED = "failed"


@dataclass(slots=True)
class RetrievedContext:
    content: str
    id: str | None = None
    score: float | None = None
    metadata: dict[str, Any] | None = None


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
    convention: str = ""  # openinference | genai | openllmetry | mapping | rag_event
    # Where `output` came from: llm_span | chain_output | event | none (ctxprec.answer_source).
    answer_source: str = "none"
    # False when the answer was read from a value of unknown shape and used as it stood.
    answer_clean: bool = True
    # The resource of the span the retrieval was read from (evaluator spans are filed under it).
    resource: dict[str, Any] = field(default_factory=dict)
    sample_rate: float = 1.0  # set by sampling
    # Called exactly once when this retrieval reached its decision, with the span attributes to
    # write back (None when there is nothing to write): releases held spans and Kafka offsets.
    on_decided: Callable[["Decision", dict[str, Any] | None], None] | None = None


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
