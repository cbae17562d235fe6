"""The data a scoring run produces. Plain dataclasses so that the collector and the batch CLI
can serialise them without knowing how they were made."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

ReferenceKind = Literal["expected_output", "output", "query"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judge's decision on one context. `index` is the 0-based rank in retrieval order."""

    index: int
    relevant: bool
    reason: str
    cached: bool = False

    def __reduce__(self) -> tuple[Any, ...]:
        # Results cross a pipe from the scoring process; the default for slotted dataclasses
        # rebuilds each field through dataclasses.fields(), several times slower.
        return (Verdict, (self.index, self.relevant, self.reason, self.cached))

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "relevant": self.relevant, "reason": self.reason}


@dataclass(slots=True)
class JudgeUsage:
    """What judging one sample cost. Added up across batches and re-asks; `calls` counts HTTP
    attempts (retries and the attempts of a call that failed included)."""

    model: str = ""
    prompt_version: str = ""
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    cached_contexts: int = 0

    def __reduce__(self) -> tuple[Any, ...]:
        return (JudgeUsage, tuple(getattr(self, name) for name in _USAGE_FIELDS))

    def add_call(self, prompt_tokens: int, completion_tokens: int, cost_usd: float, latency_ms: float,
                 *, calls: int = 1) -> None:
        """One judge call that answered; `calls` counts its HTTP attempts (retries included)."""
        self.calls += calls
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.cost_usd += cost_usd
        self.latency_ms += latency_ms

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class ScoreResult:
    """One scored sample. `score` is already scaled and rounded."""

    score: float
    reason: str
    verdicts: list[Verdict]
    precision_at_k: float
    hit: bool
    first_relevant_rank: int | None
    relevant_count: int
    k: int
    scale: float
    reference_kind: ReferenceKind
    usage: JudgeUsage = field(default_factory=JudgeUsage)
    truncated_contexts: int = 0

    def __reduce__(self) -> tuple[Any, ...]:
        return (ScoreResult, tuple(getattr(self, name) for name in _RESULT_FIELDS))

    @property
    def normalized_score(self) -> float:
        """The score on 0..1, which is what metrics histogram (scale-independent)."""
        if not self.scale:
            return 0.0
        return min(1.0, max(0.0, self.score / self.scale))


# Field order = the positional order of each generated __init__ (what __reduce__ relies on).
_USAGE_FIELDS = tuple(f.name for f in fields(JudgeUsage))
_RESULT_FIELDS = tuple(f.name for f in fields(ScoreResult))
