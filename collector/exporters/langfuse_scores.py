"""`--sink langfuse=URL`: each score as a Langfuse score, through its public scores API
(`POST /api/public/scores`, a list of scores per request, as the Langfuse SDK sends them).

One score per scored retrieval: name `context_precision`, numeric value, the reason as comment,
the trace id and the observation id (the retrieval span: Langfuse's OTLP endpoint turns span ids
into observation ids, so the score sits on the span the app sent), and metadata with the label,
the judge and the per-context verdicts. Its `id` is derived from the trace, the span, the name and
the scorer's fingerprint, and its `timestamp` is the retrieval's end: Langfuse updates a score
sent again with the same id and timestamp, so a re-score upserts instead of adding one.

The request bodies are built and encoded with the `langfuse` SDK's own models
(`CreateScoreRequest`, and the SDK's encoder), so the wire format is theirs and follows the SDK
version installed (`pip install 'ctxprec[langfuse]'`); the SDK is imported only when this sink is
configured. Keys are Langfuse's own `LANGFUSE_PUBLIC_KEY` / `LANGFUSE_SECRET_KEY` (HTTP basic
auth), never logged; `LANGFUSE_TRACING_ENVIRONMENT`, when set, becomes the scores' environment.

Langfuse answers 202 when it took the whole batch and 207 with counts when it refused some (it
does not say which; they are counted as dropped `rejected`, and, as the SDK does, not sent again).
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

import aiohttp
from ctxprec.collector.exporters.attributes import EVALUATION_NAME, score_label
from ctxprec.collector.exporters.http_backend import HttpBackend
from ctxprec.collector.exporters.sink_queue import SENT, Result, Unavailable, dropped
from ctxprec.collector.model import Decision, Outcome
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.collector.version import VERSION
from ctxprec.scorer.retry import parse_retry_after

EXPORTER = "langfuse"
SCORES_PATH = "/api/public/scores"
PUBLIC_KEY, SECRET_KEY, ENVIRONMENT = "LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY", "LANGFUSE_TRACING_ENVIRONMENT"
INSTALL_HINT = "pip install 'ctxprec[langfuse]'"
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class _Sdk:
    """The parts of the langfuse SDK this sink uses, imported on first use."""

    def __init__(self) -> None:
        try:
            from langfuse.api.commons.types.score_data_type import ScoreDataType
            from langfuse.api.core.jsonable_encoder import jsonable_encoder
            from langfuse.api.core.serialization import (
                convert_and_respect_annotation_metadata,
            )
            from langfuse.api.scores.types.create_score_batch_results import (
                CreateScoreBatchResults,
            )
            from langfuse.api.scores.types.create_score_request import (
                CreateScoreRequest,
            )
            from langfuse.api.scores.types.create_scores_request import (
                CreateScoresRequest,
            )
        except ImportError as exc:
            raise ValueError(f"sink langfuse: the langfuse SDK is not installed ({exc}); {INSTALL_HINT}") from None
        self.CreateScoreRequest = CreateScoreRequest
        self.CreateScoresRequest = CreateScoresRequest
        self.CreateScoreBatchResults = CreateScoreBatchResults
        self.NUMERIC = ScoreDataType.NUMERIC
        self._convert = convert_and_respect_annotation_metadata
        self._encode = jsonable_encoder

    def body(self, scores: Sequence[Any]) -> list[dict[str, Any]]:
        """A request body as the SDK's own client encodes it (aliases, no nulls, ISO times)."""
        return self._encode(self._convert(object_=list(scores), annotation=self.CreateScoresRequest,
                                          direction="write"))


def score_id(trace_id: str, span_id: str, name: str, identifier: str) -> str:
    """The same retrieval scored by the same scorer always gets the same id (an upsert)."""
    return hashlib.sha256(f"ctxprec|{trace_id}|{span_id}|{name}|{identifier}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class LangfuseKeys:
    public_key: str
    secret_key: str

    def __repr__(self) -> str:
        return "LangfuseKeys(***)"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "LangfuseKeys":
        env = os.environ if environ is None else environ
        public, secret = env.get(PUBLIC_KEY, ""), env.get(SECRET_KEY, "")
        if not public or not secret:
            raise ValueError(f"sink langfuse: set {PUBLIC_KEY} and {SECRET_KEY} (the project's API keys)")
        return cls(public, secret)

    @property
    def authorization(self) -> str:
        return "Basic " + base64.b64encode(f"{self.public_key}:{self.secret_key}".encode()).decode("ascii")


class LangfuseScores(HttpBackend):
    """Builds the scores (`score_of`) and is the `Backend` of a `SinkQueue` for Langfuse."""

    def __init__(self, url: str, identity: ScorerIdentity, *, keys: LangfuseKeys, threshold: float = 0.5,
                 environment: str | None = None, timeout_s: float = 10.0) -> None:
        self.sdk = _Sdk()
        self.url = url.rstrip("/") + SCORES_PATH
        self.identity = identity
        self.threshold = threshold
        self.environment = environment
        super().__init__({"Authorization": keys.authorization, "Content-Type": "application/json",
                          "User-Agent": f"ctxprec/{VERSION}"}, timeout_s)

    def score_of(self, outcome: Outcome) -> Any | None:
        """A `CreateScoreRequest` for an `evaluated` outcome, else None (a failed score sends
        nothing: it must not replace an earlier good score of the same retrieval)."""
        result = outcome.result
        if outcome.decision is not Decision.EVALUATED or result is None:
            return None
        r, identity = outcome.retrieval, self.identity
        ended = r.end_time_unix_nano / 1e9 if r.end_time_unix_nano > 0 else outcome.scored_at
        fields: dict[str, Any] = dict(
            id=score_id(r.trace_id, r.span_id, EVALUATION_NAME, identity.identifier),
            trace_id=r.trace_id,
            observation_id=r.span_id or None,
            name=EVALUATION_NAME,
            value=float(result.score),
            comment=result.reason or None,
            data_type=self.sdk.NUMERIC,
            timestamp=datetime.fromtimestamp(ended, tz=timezone.utc),
            environment=self.environment,
            metadata={
                "source": "ctxprec", "label": score_label(result, self.threshold),
                "annotator_kind": identity.annotator_kind, "judge_model": identity.model,
                "prompt_version": identity.prompt_version, "scorer": identity.identifier,
                "k": int(result.k), "precision_at_k": float(result.precision_at_k), "hit": bool(result.hit),
                "reference_kind": result.reference_kind, "sample_rate": float(r.sample_rate),
                "scale": float(result.scale),
                "verdicts": [{"rank": v.index + 1, "relevant": v.relevant, "reason": v.reason}
                             for v in result.verdicts],
            },
        )
        # Unset rather than null: the SDK's encoder writes a null it was given, and Langfuse
        # checks a present `environment` against its pattern.
        return self.sdk.CreateScoreRequest(**{k: v for k, v in fields.items() if v is not None})

    async def deliver(self, batch: Sequence[Any]) -> list[Result]:
        data = json.dumps(self.sdk.body(batch), ensure_ascii=False).encode()
        try:
            async with self.session.post(self.url, data=data) as response:
                text = await self.answer_text(response)
                status = response.status
                if status in _RETRY_STATUS:
                    raise Unavailable(f"HTTP {status}", parse_retry_after(response.headers.get("Retry-After")))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}") from None
        if status == 207:
            return self._partly(batch, text)
        if status < 300:
            return [SENT] * len(batch)
        reason = "unauthorized" if status in (401, 403) else "rejected"
        return [dropped(reason, f"HTTP {status}: {text[:200]}")] * len(batch)

    def _partly(self, batch: Sequence[Any], text: str) -> list[Result]:
        try:
            answer = self.sdk.CreateScoreBatchResults.model_validate(json.loads(text))
            refused = max(0, min(len(batch), int(answer.rejected)))
            detail = "; ".join(error.message for error in answer.errors)[:200]
        except (ValueError, TypeError):
            refused, detail = len(batch), f"HTTP 207: {text[:200]}"
        return [SENT] * (len(batch) - refused) + [dropped("rejected", detail)] * refused
