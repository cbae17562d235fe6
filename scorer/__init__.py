"""ctxprec's scoring library: context precision (MAP over judged relevance) (docs/FORMATS.md, docs/BATCH.md).

Importing this package is cheap: the engine and the judge load their transports (and litellm)
only when a scorer for a remote model is built."""
from __future__ import annotations

if __name__ != "ctxprec.scorer":
    # The folder is installed as ctxprec.scorer. Loaded under another name (the repository root on
    # sys.path) it would be a second copy with its own module state; refuse instead.
    raise ImportError(f"import ctxprec.scorer, not {__name__} (this folder is the package ctxprec.scorer)")

from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import ContextPrecisionEngine, build_engine
from ctxprec.scorer.result import JudgeUsage, ScoreResult, Verdict
from ctxprec.scorer.scorer import ContextPrecisionScorer, create_context_precision_scorer

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
