"""Score and failure -> span attributes (docs/FORMATS.md, "Span attributes written"), shared by
the span and evaluator write-back modes so that both carry exactly the same keys."""
from __future__ import annotations

import json
from typing import Any

from ctxprec.collector.model import Decision, Outcome
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.scorer.result import ScoreResult

EVALUATION_NAME = "context_precision"


def score_label(result: ScoreResult, threshold: float) -> str:
    return "high" if result.normalized_score >= threshold else "low"


def _provenance(identity: ScorerIdentity, sample_rate: float, reference_kind: str | None,
                answer_source: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "ctxprec.judge.model": identity.model,
        "ctxprec.prompt_version": identity.prompt_version,
        "ctxprec.sample_rate": float(sample_rate),
        "ctxprec.answer_source": answer_source,
    }
    if reference_kind:
        attrs["ctxprec.reference_kind"] = reference_kind
    return attrs


def outcome_attributes(outcome: Outcome, identity: ScorerIdentity, *, threshold: float) -> dict[str, Any] | None:
    """The attributes an outcome writes: a score's, a failure's, or None for a retrieval that was
    not scored (its span goes on as it was)."""
    r = outcome.retrieval
    if outcome.decision is Decision.EVALUATED and outcome.result is not None:
        attrs = score_attributes(outcome.result, identity, threshold=threshold, sample_rate=r.sample_rate,
                                 answer_source=r.answer_source, answer_clean=r.answer_clean)
    elif outcome.decision is Decision.FAILED:
        error_type = outcome.error[0] if outcome.error else "failed"
        attrs = failure_attributes(error_type, identity, sample_rate=r.sample_rate, answer_source=r.answer_source)
    else:
        return None
    if r.documents_resolved:  # their text came from the app's store, never from the span (nor back to it)
        attrs["ctxprec.documents_resolved"] = True
    return attrs


def score_attributes(result: ScoreResult, identity: ScorerIdentity, *, threshold: float, sample_rate: float,
                     answer_source: str = "none", answer_clean: bool = True) -> dict[str, Any]:
    """`answer_clean=False` (the answer was a value of unknown shape, used as it stood) adds
    `ctxprec.answer_raw = true`, so that such scores can be found and the shape reported."""
    label = score_label(result, threshold)
    score = float(result.score)
    attrs: dict[str, Any] = {
        "gen_ai.evaluation.name": EVALUATION_NAME,
        "gen_ai.evaluation.score.value": score,
        "gen_ai.evaluation.score.label": label,
        "gen_ai.evaluation.explanation": result.reason,
        "evaluations.0.evaluation.name": EVALUATION_NAME,
        "evaluations.0.evaluation.score": score,
        "evaluations.0.evaluation.label": label,
        "evaluations.0.evaluation.explanation": result.reason,
        "evaluations.0.evaluation.annotator_kind": identity.annotator_kind,
        "evaluations.0.evaluation.identifier": identity.identifier,
        "ctxprec.verdicts": json.dumps([v.to_dict() for v in result.verdicts], ensure_ascii=False),
        "ctxprec.precision_at_k": float(result.precision_at_k),
        "ctxprec.hit": bool(result.hit),
        "ctxprec.k": int(result.k),
    }
    # OTLP attributes cannot be null: no relevant item means the key is absent.
    if result.first_relevant_rank is not None:
        attrs["ctxprec.first_relevant_rank"] = int(result.first_relevant_rank)
    attrs.update(_provenance(identity, sample_rate, result.reference_kind, answer_source))
    if not answer_clean:
        attrs["ctxprec.answer_raw"] = True
    return attrs


def failure_attributes(error_type: str, identity: ScorerIdentity, *, sample_rate: float,
                       answer_source: str = "none") -> dict[str, Any]:
    """A failed sample: `error.type` and provenance, never a score or a label."""
    attrs: dict[str, Any] = {
        "gen_ai.evaluation.name": EVALUATION_NAME,
        "evaluations.0.evaluation.name": EVALUATION_NAME,
        "evaluations.0.evaluation.annotator_kind": identity.annotator_kind,
        "evaluations.0.evaluation.identifier": identity.identifier,
        "error.type": error_type,
    }
    attrs.update(_provenance(identity, sample_rate, None, answer_source))
    return attrs
