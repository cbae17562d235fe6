"""With `--redact-pii`, the text of every scored outcome is redacted once, here, before any
exporter sees it: the reason and the verdicts' reasons, a failure's message, the score record's
copies of those and its question and document previews, and the retrieval's question, answer and
contexts (which diagnostics previews quote). Span write-back, evaluator spans, the Kafka results topic, sinks, diagnostics and the
log all sit downstream, so none of them can send text the judge was not allowed to see.

The judge already worked on redacted text, so what it wrote should hold no personal data; this
pass catches what it echoed or invented anyway, and error messages built from the input.
Redacting is idempotent (placeholders are not matched again), so redacted text passes unchanged.
Outcomes that were not scored carry no text anyone writes out and go through untouched."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ctxprec.collector.components import ResultSink, Stateless
from ctxprec.collector.model import Outcome, Retrieval, RetrievedContext
from ctxprec.scorer.redact import redacted
from ctxprec.scorer.result import ScoreResult

redact_text = redacted  # the redaction every text written out goes through


class RedactingSink(Stateless):
    """A `ResultSink` in front of the exporters that passes each scored outcome on redacted."""

    def __init__(self, downstream: ResultSink, redactor: Callable[[str], str] = redact_text) -> None:
        self.downstream = downstream
        self._redact = redactor

    def emit(self, outcome: Outcome) -> None:
        if outcome.scored:
            outcome = self.redacted(outcome)
        self.downstream.emit(outcome)

    def redacted(self, outcome: Outcome) -> Outcome:
        r = self._redact
        error = (outcome.error[0], r(outcome.error[1])) if outcome.error is not None else None
        return dataclasses.replace(
            outcome, retrieval=self._retrieval(outcome.retrieval),
            result=self._result(outcome.result) if outcome.result is not None else None,
            error=error, record=self._record(outcome.record) if outcome.record is not None else None)

    def _retrieval(self, retrieval: Retrieval) -> Retrieval:
        r = self._redact
        return dataclasses.replace(
            retrieval, query=r(retrieval.query),
            output=r(retrieval.output) if retrieval.output is not None else None,
            expected_output=r(retrieval.expected_output) if retrieval.expected_output is not None else None,
            contexts=[RetrievedContext(r(c.content), c.id, c.score, c.metadata) for c in retrieval.contexts])

    def _result(self, result: ScoreResult) -> ScoreResult:
        r = self._redact
        return dataclasses.replace(result, reason=r(result.reason),
                                   verdicts=[dataclasses.replace(v, reason=r(v.reason)) for v in result.verdicts])

    def _record(self, record: dict[str, Any]) -> dict[str, Any]:
        r = self._redact
        copy = dict(record)
        for key in ("reason", "query"):
            if isinstance(copy.get(key), str):
                copy[key] = r(copy[key])
        if isinstance(copy.get("verdicts"), list):
            copy["verdicts"] = [self._verdict(v) if isinstance(v, dict) else v for v in copy["verdicts"]]
        error = copy.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            copy["error"] = {**error, "message": r(error["message"])}
        return copy

    def _verdict(self, verdict: dict[str, Any]) -> dict[str, Any]:
        return {**verdict, **{key: self._redact(verdict[key]) for key in ("reason", "preview")
                              if isinstance(verdict.get(key), str)}}
