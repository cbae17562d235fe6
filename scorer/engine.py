"""ContextPrecisionEngine: query + ranked contexts (+ answer) -> ScoreResult.

It picks the reference (expected_output, else output, else the query alone), has the judge
rule on every context, computes MAP and its companions from those verdicts, and writes the
reason. It knows nothing about where contexts come from (that is scorer.py's job) or about
transport (that is the ChatClient's)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.judge.base import Judge
from ctxprec.scorer.judge.chat import RequestObserver

if TYPE_CHECKING:
    from ctxprec.scorer.judge.shared_cache import CacheObserver
from ctxprec.scorer.precision import summarize, validate_scale
from ctxprec.scorer.reason import build_reason
from ctxprec.scorer.redact import Redactor
from ctxprec.scorer.result import ReferenceKind, ScoreResult

NO_CONTEXT_MESSAGE = "No context available for evaluation"


def pick_reference(query: str, output: str | None, expected_output: str | None) -> tuple[ReferenceKind, str]:
    if isinstance(expected_output, str) and expected_output.strip():
        return "expected_output", expected_output
    if isinstance(output, str) and output.strip():
        return "output", output
    return "query", ""


def check_inputs(query: object, contexts: object) -> list[str]:
    """The sample's contexts as a list, or ValueError naming what is wrong with the input."""
    if not isinstance(query, str):
        raise ValueError(f"query: must be a string, got {type(query).__name__}")
    if contexts is None or isinstance(contexts, (str, bytes)):
        raise ValueError("contexts: must be a list of strings")
    try:
        items = list(contexts)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"contexts: must be a list of strings, got {type(contexts).__name__}") from None
    if not items:
        raise ValueError(NO_CONTEXT_MESSAGE)
    bad = [i for i, c in enumerate(items) if not isinstance(c, str)]
    if bad:
        raise ValueError(f"contexts: every context must be a string; not at index {bad[:5]}")
    return items


def fingerprint(
    model: str, prompt_version: str, scale: float, reason_mode: str, max_context_chars: int, redact_pii: bool = False
) -> str:
    fields: dict[str, object] = {
        "model": model, "prompt": prompt_version, "scale": float(scale), "reason": reason_mode, "chars": max_context_chars
    }
    if redact_pii:
        # Only when on, so that the fingerprints of existing configurations do not move.
        fields["redact"] = True
    blob = json.dumps(fields, sort_keys=True)
    return "cp-" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class EngineIdentity:
    """What an engine built from a configuration says about itself (score attributes and records),
    known without building it: a scoring process's parent needs it before the child is up."""

    model: str
    prompt_version: str
    annotator_kind: str  # "LLM" | "CODE"
    fingerprint: str
    scale: float


def _is_local(config: JudgeConfig) -> bool:
    return config.model.strip().lower() == "local"


def engine_identity(config: JudgeConfig, *, scale: float = 1) -> EngineIdentity:
    """The identity `build_engine(config, scale=scale)` will have."""
    scale = validate_scale(scale)
    if _is_local(config):
        from ctxprec.scorer.judge.local import LOCAL_PROMPT_VERSION, LocalJudge

        model, prompt_version, kind = "local", LOCAL_PROMPT_VERSION, LocalJudge.annotator_kind
    else:
        from ctxprec.scorer.judge.llm import LLMJudge

        model, prompt_version, kind = config.model, LLMJudge.prompt_version, LLMJudge.annotator_kind
    return EngineIdentity(model, prompt_version, kind, fingerprint(
        model, prompt_version, scale, config.reason_mode, config.max_context_chars, config.redact_pii), scale)


class ContextPrecisionEngine:
    def __init__(
        self,
        judge: Judge,
        *,
        scale: float = 1,
        reason_mode: str = "template",
        max_context_chars: int = 4000,
        redactor: Redactor | None = None,
    ) -> None:
        self.judge = judge
        self.scale = validate_scale(scale)
        self.model = judge.model
        self.prompt_version = judge.prompt_version
        self.annotator_kind = judge.annotator_kind
        self.reason_mode = reason_mode
        self.max_context_chars = max_context_chars
        # Set when JudgeConfig.redact_pii is on; `redactor.counts` totals what was replaced.
        self.redactor = redactor
        self.fingerprint = fingerprint(
            self.model, self.prompt_version, self.scale, reason_mode, max_context_chars, redactor is not None
        )

    async def score(
        self,
        query: str,
        contexts: Sequence[str],
        *,
        output: str | None = None,
        expected_output: str | None = None,
    ) -> ScoreResult:
        contexts = check_inputs(query, contexts)
        if self.redactor is not None:
            # Before the judge sees anything: the prompt, the verdict cache keys and the
            # llm-mode reason request are all built from the redacted text.
            sample = self.redactor.redact_sample(query, contexts, output, expected_output)
            query, contexts, output, expected_output = sample.query, sample.contexts, sample.output, sample.expected_output
        reference_kind, reference = pick_reference(query, output, expected_output)
        outcome = await self.judge.judge(query, contexts, reference_kind=reference_kind, reference=reference)
        summary = summarize([v.relevant for v in outcome.verdicts], self.scale)
        reason = None
        try:
            reason = await self.judge.explain(
                query=query,
                reference_kind=reference_kind,
                reference=reference,
                score=summary.score,
                verdicts=outcome.verdicts,
                usage=outcome.usage,
            )
        except Exception as exc:  # noqa: BLE001 - any failure of the optional reason call
            # The verdicts and the score are sound; only the judge-written prose is missing.
            fallback_note = f" (The judge-written reason was unavailable: {exc}.)"
        else:
            fallback_note = ""
        if reason is None:
            reason = build_reason(
                score=summary.score,
                verdicts=outcome.verdicts,
                summary=summary,
                reference_kind=reference_kind,
                truncated_contexts=outcome.truncated_contexts,
                max_context_chars=self.max_context_chars,
            ) + fallback_note
        return ScoreResult(
            score=summary.score,
            reason=reason,
            verdicts=outcome.verdicts,
            precision_at_k=summary.precision_at_k,
            hit=summary.hit,
            first_relevant_rank=summary.first_relevant_rank,
            relevant_count=summary.relevant_count,
            k=summary.k,
            scale=self.scale,
            reference_kind=reference_kind,
            usage=outcome.usage,
            truncated_contexts=outcome.truncated_contexts,
        )

    async def warm_up(self) -> None:
        """One-time work done at start-up instead of inside the first scores (a long-running
        service calls this once; a one-shot caller can skip it)."""
        warm = getattr(self.judge, "warm_up", None)
        if warm is not None:
            await warm()

    async def aclose(self) -> None:
        await self.judge.aclose()


def build_engine(config: JudgeConfig, *, scale: float = 1, observer: RequestObserver | None = None,
                 cache_observer: CacheObserver | None = None) -> ContextPrecisionEngine:
    """LocalJudge for model="local" (no network), else LLMJudge over the configured ChatClient,
    with the shared verdict cache when `config.cache_url` is set (it reports to `cache_observer`).
    Either reports each judging request to `observer`."""
    validate_scale(scale)
    if _is_local(config):
        from ctxprec.scorer.judge.local import LocalJudge

        judge: Judge = LocalJudge(max_context_chars=config.max_context_chars, observer=observer)
    else:
        from ctxprec.scorer.judge.factory import make_chat_client
        from ctxprec.scorer.judge.llm import LLMJudge

        from ctxprec.scorer.judge.shared_cache import SharedVerdictCache

        shared = SharedVerdictCache(config.cache_url, observer=cache_observer) if config.cache_url else None
        judge = LLMJudge(make_chat_client(config, observer), config, shared=shared)
    return ContextPrecisionEngine(
        judge,
        scale=scale,
        reason_mode=config.reason_mode,
        max_context_chars=config.max_context_chars,
        redactor=Redactor() if config.redact_pii else None,
    )
