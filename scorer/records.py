"""Score records (docs/FORMATS.md, "Score record"): the JSON written by `ctxprec score`, the sidecar
and the Kafka results topic. One builder so that all three write the same fields in the same order."""
from __future__ import annotations

import hashlib
import math
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from ctxprec.scorer.documents import HasContent, first_words, identity, is_text_hash
from ctxprec.scorer.result import JudgeUsage, ScoreResult, Verdict

# The order of the keys is part of the format: consumers diff and grep these lines.
RECORD_FIELDS: tuple[str, ...] = (
    "id",
    "trace_id",
    "span_id",
    "service",
    "retriever",
    "score",
    "scale",
    "reason",
    "verdicts",
    "precision_at_k",
    "hit",
    "first_relevant_rank",
    "relevant_count",
    "k",
    "reference_kind",
    "answer_source",
    # "documents_resolved" stands here, only in the records of retrievals whose documents'
    # text a resolver looked up by id (the sidecar's, never `ctxprec score`'s).
    "judge",
    "sample_rate",
    "decision",
    "error",
    "scored_at",
    "timestamp",
    "query",
    "line",
    "event_id",
)
JUDGE_FIELDS: tuple[str, ...] = (
    "model",
    "prompt_version",
    "calls",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "latency_ms",
    "cached_contexts",
)


# The first words of a document named by a hash (it has no id), kept in its verdict as `preview`
# so that a person can tell which document the hash stands for.
PREVIEW_CHARS = 80


def record_text(text: str | None, chars: int, redact: Callable[[str], str] | None = None) -> str | None:
    """Text as a record keeps it: redacted first (so that an address cut in two is still found),
    then at most `chars` characters of whole words; None when records keep no text (`chars` 0)."""
    if text is None or chars <= 0:
        return None
    return first_words(redact(text[: chars * 4]) if redact is not None else text, chars)


def document_names(contexts: Sequence[HasContent], text_chars: int,
                   redact: Callable[[str], str] | None = None) -> tuple[list[str], list[str | None]]:
    """Each context's identity (scorer.documents) and, for one named by a hash of its text, the
    first words of that text (None for a context with an id, or when records keep no text)."""
    names = [identity(c) for c in contexts]
    chars = min(text_chars, PREVIEW_CHARS)
    previews = [record_text(c.content, chars, redact) if is_text_hash(name) else None
                for c, name in zip(contexts, names)]
    return names, previews


def record_id(trace_id: str, span_id: str, fingerprint: str, *, content: str | None = None) -> str:
    """The idempotency key: the same span scored by the same scorer configuration always gets the
    same id, so a replayed Kafka message or a re-run batch can be de-duplicated downstream.

    An event without trace and span ids has no identity of its own; `content` (e.g. the query and
    contexts) stands in for it so that two different id-less events do not collide."""
    if trace_id or span_id or content is None:
        key = f"{trace_id}\x1f{span_id}\x1f{fingerprint}"
    else:
        key = f"content\x1f{content}\x1f{fingerprint}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def rfc3339_now() -> str:
    return rfc3339(datetime.now(timezone.utc))


def rfc3339(moment: datetime) -> str:
    """UTC, millisecond precision, `Z` suffix (2026-11-29T12:00:00.123Z)."""
    utc = moment.astimezone(timezone.utc) if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def score_record(
    result: ScoreResult,
    *,
    record_id: str,
    trace_id: str = "",
    span_id: str = "",
    service: str = "",
    retriever: str = "",
    model: str = "",
    prompt_version: str = "",
    sample_rate: float = 1.0,
    decision: str = "evaluated",
    answer_source: str = "none",
    scored_at: datetime | None = None,
    timestamp: str | None = None,
    document_ids: Sequence[str] | None = None,
    query: str | None = None,
    line: int | None = None,
    event_id: str | None = None,
    previews: Sequence[str | None] | None = None,
    documents_resolved: bool = False,
) -> dict[str, Any]:
    """The record of a scored sample. `model`/`prompt_version` fill in when the usage lacks them.
    `answer_source` says where the answer judged against came from: `event` (the input carried
    it), `llm_span` or `chain_output` (read from a trace), `none`. `timestamp` is when the sample
    itself happened (the event's own time), as opposed to `scored_at`. `document_ids`, one per
    context in rank order (scorer.documents), adds a `document` key to each verdict, and
    `previews` (`document_names`) a `preview` to those named by a hash. `query` is the question
    as the record keeps it (`record_text`); `line` and `event_id` say where a batch event was read
    (its line in the input file, the `id` it carried). `documents_resolved` adds
    `"documents_resolved": true` after `answer_source`."""
    return {
        "id": record_id,
        "trace_id": trace_id,
        "span_id": span_id,
        "service": service,
        "retriever": retriever,
        "score": result.score,
        "scale": _plain_number(result.scale),
        "reason": result.reason,
        "verdicts": verdict_dicts(result.verdicts, document_ids, previews),
        "precision_at_k": result.precision_at_k,
        "hit": result.hit,
        "first_relevant_rank": result.first_relevant_rank,
        "relevant_count": result.relevant_count,
        "k": result.k,
        "reference_kind": result.reference_kind,
        "answer_source": answer_source,
        **_RESOLVED[documents_resolved],
        "judge": judge_block(result.usage, model=model, prompt_version=prompt_version),
        "sample_rate": _plain_number(sample_rate),
        "decision": decision,
        "error": None,
        "scored_at": rfc3339(scored_at) if scored_at else rfc3339_now(),
        "timestamp": timestamp,
        "query": query,
        "line": line,
        "event_id": event_id,
    }


def verdict_dicts(verdicts: Sequence[Verdict], document_ids: Sequence[str] | None = None,
                  previews: Sequence[str | None] | None = None) -> list[dict[str, Any]]:
    """The verdicts as the record writes them: `index`, `relevant`, `reason`, then `document` when
    the contexts' identities are known and `preview` when that identity is a hash and records keep
    text. A verdict whose index has no identity (a caller that passed fewer ids than contexts) is
    written without one rather than with a wrong one."""
    if document_ids is None:
        return [v.to_dict() for v in verdicts]
    out = []
    count = len(document_ids)
    for verdict in verdicts:
        entry = verdict.to_dict()
        if 0 <= verdict.index < count:
            entry["document"] = document_ids[verdict.index]
            preview = previews[verdict.index] if previews is not None and verdict.index < len(previews) else None
            if preview is not None:
                entry["preview"] = preview
        out.append(entry)
    return out


def failure_record(
    *,
    error_type: str,
    message: str,
    record_id: str,
    trace_id: str = "",
    span_id: str = "",
    service: str = "",
    retriever: str = "",
    scale: float = 1,
    model: str = "",
    prompt_version: str = "",
    k: int | None = None,
    reference_kind: str | None = None,
    usage: JudgeUsage | None = None,
    sample_rate: float = 1.0,
    decision: str = "failed",
    answer_source: str = "none",
    scored_at: datetime | None = None,
    timestamp: str | None = None,
    query: str | None = None,
    line: int | None = None,
    event_id: str | None = None,
    documents_resolved: bool = False,
) -> dict[str, Any]:
    """The record of a sample that got no score: every score field is null, `error` says why.
    `usage` keeps what the failed attempt still cost (tokens spent before the failure)."""
    return {
        "id": record_id,
        "trace_id": trace_id,
        "span_id": span_id,
        "service": service,
        "retriever": retriever,
        "score": None,
        "scale": _plain_number(scale),
        "reason": None,
        "verdicts": [],
        "precision_at_k": None,
        "hit": None,
        "first_relevant_rank": None,
        "relevant_count": None,
        "k": k,
        "reference_kind": reference_kind,
        "answer_source": answer_source,
        **_RESOLVED[documents_resolved],
        "judge": judge_block(usage or JudgeUsage(), model=model, prompt_version=prompt_version),
        "sample_rate": _plain_number(sample_rate),
        "decision": decision,
        "error": {"type": error_type, "message": message},
        "scored_at": rfc3339(scored_at) if scored_at else rfc3339_now(),
        "timestamp": timestamp,
        "query": query,
        "line": line,
        "event_id": event_id,
    }


_RESOLVED: dict[bool, dict[str, Any]] = {False: {}, True: {"documents_resolved": True}}


def judge_block(usage: JudgeUsage, *, model: str = "", prompt_version: str = "") -> dict[str, Any]:
    return {
        "model": usage.model or model,
        "prompt_version": usage.prompt_version or prompt_version,
        "calls": usage.calls,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        # Float noise from summing per-call costs would show as 1.2000000000000002e-05.
        "cost_usd": round(usage.cost_usd, 10),
        "latency_ms": round(usage.latency_ms, 1),
        "cached_contexts": usage.cached_contexts,
    }


def _plain_number(value: float) -> float | int:
    """1.0 -> 1 so that records read `"scale": 1` as docs/FORMATS.md shows; other values untouched."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value
