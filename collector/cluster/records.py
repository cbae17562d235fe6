"""A score record read back from the Kafka results topic, turned into the `PeerScore` the drift
monitor and the diagnostics learn from, or refused with the reason it is counted under."""
from __future__ import annotations

import json
from typing import Any

from ctxprec.collector.kafka.score_headers import ReadHeaders
from ctxprec.collector.model import PeerScore
from ctxprec.scorer.result import Verdict

# What becomes of each record read back (`ctxprec_cluster_records_total{outcome}`): learned from,
# this replica's own, seen before, a failed sample's, another judge's, unreadable, or skipped
# because the feed fell too far behind.
OUTCOMES = ("applied", "own", "duplicate", "not_evaluated", "other_scorer", "malformed", "skipped")


class Malformed(ValueError):
    """Not a score record this version can learn from."""


class NotEvaluated(Exception):
    """A well-formed record of a sample that got no score (failed): nothing to learn."""


class OtherScorer(Exception):
    """A record of another judge model or prompt version (a rolling change of the judge): its
    scores are not comparable with ours, so they must not move our detector."""


def peer_score(value: bytes | None, headers: ReadHeaders, *, model: str, prompt_version: str) -> PeerScore:
    try:
        record = json.loads(value) if value else None
    except (ValueError, UnicodeDecodeError):
        raise Malformed("not JSON") from None
    if not isinstance(record, dict):
        raise Malformed("not a JSON object")
    if record.get("decision") != "evaluated":
        if record.get("decision") == "failed":
            raise NotEvaluated()
        raise Malformed(f"decision {record.get('decision')!r}")
    judge = record.get("judge")
    if not isinstance(judge, dict):
        raise Malformed("no judge block")
    if judge.get("model") != model or judge.get("prompt_version") != prompt_version:
        raise OtherScorer()
    score, scale = record.get("score"), record.get("scale")
    if not _number(score) or not _number(scale) or scale <= 0:
        raise Malformed("score or scale is not a number")
    service, retriever = record.get("service"), record.get("retriever")
    if not isinstance(service, str) or not isinstance(retriever, str):
        raise Malformed("service or retriever is not text")
    raw_verdicts = record.get("verdicts")
    if not isinstance(raw_verdicts, list):
        raise Malformed("verdicts is not a list")
    verdicts: list[Verdict] = []
    documents: list[str] = []
    for i, item in enumerate(raw_verdicts):
        if (not isinstance(item, dict) or item.get("index") != i or not isinstance(item.get("relevant"), bool)
                or not isinstance(item.get("document"), str)):
            raise Malformed(f"verdict {i} lacks index, relevance or document")
        verdicts.append(Verdict(i, item["relevant"], ""))
        documents.append(item["document"])
    chars = headers.context_chars if len(headers.context_chars) == len(verdicts) else []
    return PeerScore(service=service, retriever=retriever, score=min(1.0, max(0.0, score / scale)),
                     verdicts=verdicts, documents=documents, context_chars=chars, slices=headers.slices)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
