"""ctxprec's scoring library: context precision (MAP over judged relevance) as in the seeds.

Importing this package is cheap: the engine and the judge load their transports (and litellm)
only when a scorer for a remote model is built."""
from __future__ import annotations

from scorer.config import JudgeConfig
from scorer.engine import ContextPrecisionEngine, build_engine
from scorer.result import JudgeUsage, ScoreResult, Verdict
from scorer.scorer import ContextPrecisionScorer, create_context_precision_scorer

__all__ = [
    "create_context_precision_scorer",
    "ContextPrecisionScorer",
    "ContextPrecisionEngine",
    "build_engine",
    "JudgeConfig",
    "ScoreResult",
    "Verdict",
    "JudgeUsage",
]
