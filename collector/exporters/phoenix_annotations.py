"""`--sink phoenix=URL`: each score as Arize Phoenix annotations, through its REST API.

Phoenix shows evaluations from its annotation store, not from span attributes. For each scored
retrieval this sink writes:

- a span annotation `context_precision` on the retrieval span (`POST /v1/span_annotations`):
  score, label (`high`/`low` against `--threshold`), the reason as explanation, annotator kind
  LLM (a model judge) or CODE (the local judge), and the scorer's fingerprint as identifier.
  Phoenix upserts on (name, span, identifier): scoring the same span again with the same scorer
  replaces the annotation instead of adding one;
- when the span carries OpenInference `retrieval.documents`, one document annotation `relevance`
  per judged context (`POST /v1/document_annotations`): score 1 or 0, label
  `relevant`/`irrelevant`, the judge's reason for that context, at the context's position in
  `retrieval.documents` (Phoenix checks the position against them, and computes its own
  precision@k, NDCG and hit rate from these). Phoenix refuses an identifier there; its upsert
  key is (name, span, position). Spans of the other conventions get the span annotation only.

Requests use Phoenix's synchronous mode (`?sync=true`): in the default mode Phoenix answers 200
even for a span it does not have and silently gives up later. A 404 (the span is not stored yet:
it may have been forwarded a moment ago) makes that item wait and try again alone until
`--sink-deadline`. One unknown span makes Phoenix refuse the whole batch, so the unknown ones
(named in Phoenix's answer, else found one by one) are set aside and the rest sent again.

The API key is Phoenix's own `PHOENIX_API_KEY`, sent as a bearer token and never logged.
"""
from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import aiohttp
from ctxprec.collector.exporters.attributes import EVALUATION_NAME, score_label
from ctxprec.collector.exporters.http_backend import HttpBackend
from ctxprec.collector.exporters.sink_queue import (
    SENT,
    Fate,
    Result,
    Unavailable,
    dropped,
    later,
)
from ctxprec.collector.model import Decision, Outcome
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.collector.version import VERSION
from ctxprec.scorer.retry import parse_retry_after

EXPORTER = "phoenix"
DOCUMENT_ANNOTATION = "relevance"
SPAN_PATH = "/v1/span_annotations?sync=true"
DOCUMENT_PATH = "/v1/document_annotations?sync=true"
NOT_FOUND = "span_not_found"
_SPAN_ID = re.compile(r"^[0-9a-f]{16}$")
_SPAN_IDS_IN_TEXT = re.compile(r"\b[0-9a-f]{16}\b")
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(slots=True)
class Annotations:
    """What one score writes into Phoenix. `documents` empties once they are written, and
    `span_written` is set once the span annotation is, so that a retry sends only the rest."""

    span_id: str
    span: dict[str, Any]
    documents: list[dict[str, Any]] = field(default_factory=list)
    span_written: bool = False


def annotations_of(outcome: Outcome, identity: ScorerIdentity, *, threshold: float) -> Annotations | None:
    """The annotations of an `evaluated` outcome; None for anything else (a failed score writes
    nothing: it must not replace an earlier good annotation of the same span) or for an id that
    is not an OTel span id (a RAG event's own id: there is no span to annotate)."""
    result = outcome.result
    if outcome.decision is not Decision.EVALUATED or result is None:
        return None
    r = outcome.retrieval
    if not _SPAN_ID.match(r.span_id) or r.span_id == "0" * 16:
        return None
    span = {
        "name": EVALUATION_NAME,
        "span_id": r.span_id,
        "annotator_kind": identity.annotator_kind,
        "identifier": identity.identifier,
        "result": {"score": float(result.score), "label": score_label(result, threshold),
                   "explanation": result.reason},
        "metadata": {
            "source": "ctxprec", "judge_model": identity.model, "prompt_version": identity.prompt_version,
            "k": int(result.k), "precision_at_k": float(result.precision_at_k), "hit": bool(result.hit),
            "first_relevant_rank": result.first_relevant_rank, "reference_kind": result.reference_kind,
            "sample_rate": float(r.sample_rate), "scale": float(result.scale),
        },
    }
    return Annotations(r.span_id, span, _documents(outcome, identity))


def _documents(outcome: Outcome, identity: ScorerIdentity) -> list[dict[str, Any]]:
    """Only where positions are known: OpenInference `retrieval.documents.{i}` (Phoenix reads a
    RERANKER span's positions from other attributes, so those get none)."""
    r, result = outcome.retrieval, outcome.result
    assert result is not None
    if r.convention != "openinference" or r.attributes.get("openinference.span.kind") == "RERANKER":
        return []
    documents = []
    for verdict in result.verdicts:
        if not 0 <= verdict.index < len(r.contexts):
            return []
        position = r.contexts[verdict.index].position
        if position is None:
            return []
        documents.append({
            "name": DOCUMENT_ANNOTATION,
            "span_id": r.span_id,
            "document_position": position,
            "annotator_kind": identity.annotator_kind,
            "result": {"score": 1.0 if verdict.relevant else 0.0,
                       "label": "relevant" if verdict.relevant else "irrelevant",
                       "explanation": verdict.reason},
            "metadata": {"source": "ctxprec", "judge_model": identity.model,
                         "prompt_version": identity.prompt_version, "scorer": identity.identifier,
                         "rank": verdict.index + 1},
        })
    return documents


class PhoenixAnnotations(HttpBackend):
    """The `Backend` of a `SinkQueue` for Phoenix."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        # A base URL given as the OTLP traces endpoint means the same server.
        if self.url.endswith("/v1/traces"):
            self.url = self.url[: -len("/v1/traces")]
        headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": f"ctxprec/{VERSION}"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        super().__init__(headers, timeout_s)

    async def deliver(self, batch: Sequence[Annotations]) -> list[Result]:
        results: dict[int, Result] = {}
        spans = [item for item in batch if not item.span_written]
        for item, result in zip(spans, await self._write(SPAN_PATH, spans, lambda i: [i.span])):
            if result.fate is Fate.SENT:
                item.span_written = True
            else:
                results[id(item)] = result
        # Documents only once their span is known to Phoenix (its span annotation went).
        documents = [item for item in batch if item.span_written and item.documents]
        for item, result in zip(documents, await self._write(DOCUMENT_PATH, documents, lambda i: i.documents)):
            if result.fate is Fate.SENT:
                item.documents = []
            else:
                results[id(item)] = result
        return [results.get(id(item), SENT) for item in batch]

    async def _write(self, path: str, items: list[Annotations],
                     parts: Callable[[Annotations], list[dict[str, Any]]]) -> list[Result]:
        if not items:
            return []
        status, text = await self._post(path, [part for item in items for part in parts(item)])
        if status < 300:
            return [SENT] * len(items)
        if status == 404:
            return await self._not_found(path, items, parts, text)
        if status == 422 and len(items) > 1:  # one bad item (a position out of range) fails the batch
            return [result for item in items for result in await self._write(path, [item], parts)]
        reason = "unauthorized" if status in (401, 403) else "rejected"
        return [dropped(reason, f"HTTP {status}: {text[:200]}")] * len(items)

    async def _not_found(self, path: str, items: list[Annotations],
                         parts: Callable[[Annotations], list[dict[str, Any]]], text: str) -> list[Result]:
        """Phoenix names the spans it does not have ("Spans with IDs ... do not exist."): those
        wait, the others go again. When the answer names none of them, one by one."""
        if len(items) == 1:
            return [later(NOT_FOUND, text[:200])]
        named = set(_SPAN_IDS_IN_TEXT.findall(text))
        unknown = [item for item in items if item.span_id in named]
        if not unknown:
            return [result for item in items for result in await self._write(path, [item], parts)]
        known = [item for item in items if item.span_id not in named]
        sent = iter(await self._write(path, known, parts))
        return [later(NOT_FOUND, text[:200]) if item.span_id in named else next(sent) for item in items]

    async def _post(self, path: str, data: list[dict[str, Any]]) -> tuple[int, str]:
        try:
            async with self.session.post(self.url + path, json={"data": data}) as response:
                text = await self.answer_text(response)
                if response.status in _RETRY_STATUS:
                    raise Unavailable(f"HTTP {response.status}", parse_retry_after(response.headers.get("Retry-After")))
                return response.status, text
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}") from None
