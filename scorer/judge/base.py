"""What every judge (LLM or local) gives the engine, and the context truncation they share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

from ctxprec.scorer.result import JudgeUsage, ReferenceKind, Verdict


@dataclass(slots=True)
class JudgeOutcome:
    verdicts: list[Verdict]  # one per context, in rank order
    usage: JudgeUsage = field(default_factory=JudgeUsage)
    truncated_contexts: int = 0


class Judge(Protocol):
    model: str
    prompt_version: str
    annotator_kind: str  # "LLM" | "CODE"

    async def judge(
        self, query: str, contexts: Sequence[str], *, reference_kind: ReferenceKind, reference: str
    ) -> JudgeOutcome: ...

    async def explain(
        self,
        *,
        query: str,
        reference_kind: ReferenceKind,
        reference: str,
        score: float,
        verdicts: Sequence[Verdict],
        usage: JudgeUsage,
    ) -> str | None:
        """A judge-written reason, or None to use the template reason."""
        ...

    async def aclose(self) -> None: ...


def truncate(contexts: Sequence[str], max_chars: int) -> tuple[list[str], int]:
    """Cut each context to `max_chars`; returns the texts and how many were cut."""
    cut = 0
    out: list[str] = []
    for text in contexts:
        if len(text) > max_chars:
            cut += 1
            text = text[:max_chars]
        out.append(text)
    return out, cut
