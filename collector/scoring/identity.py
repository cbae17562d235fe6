"""What a score says about the scorer that produced it: written into records, span attributes and
annotations, so that scores of different configurations are never mixed up."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ScorerIdentity:
    model: str
    prompt_version: str
    annotator_kind: str  # "LLM" | "CODE"
    identifier: str  # the engine's configuration fingerprint
    scale: float = 1.0

    @classmethod
    def of_engine(cls, engine: Any) -> "ScorerIdentity":
        return cls(
            model=str(engine.model),
            prompt_version=str(engine.prompt_version),
            annotator_kind=str(engine.annotator_kind),
            identifier=str(engine.fingerprint),
            scale=float(engine.scale),
        )
