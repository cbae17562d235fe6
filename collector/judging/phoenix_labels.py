"""People's labels read back from Arize Phoenix: the human annotations on the spans ctxprec scored
(with `--sink phoenix=URL`, the Phoenix its scores go to), asked for on a schedule
(`--labels-phoenix-interval`) and matched like any other label (labels.py).

What counts as a label, among the annotations whose annotator kind is HUMAN:

- a document annotation (Phoenix's per-document annotation, at a position of the span's
  `retrieval.documents`): the context at that position is relevant when the label says so
  (`relevant`, `yes`, `true`, `1`; `irrelevant`, `not relevant`, `no`, `false`, `0` say not),
  else when its score is at least 0.5;
- a span annotation whose metadata holds `"relevant": [true, false, ...]` (one per context, in
  rank order), as a label line would.

The annotator is `phoenix:` and the annotation's name (and identifier, when it has one), so that
two people's annotations count twice and one re-read counts nothing twice. Phoenix 20 reads
document annotations only through GraphQL, so each round asks GraphQL about the spans scored
recently (the verdict store's), 50 spans a request, at most `MAX_SPANS_PER_ROUND` a round, most
recent first; every answer is bounded in size and time, and a failed round is logged and retried
at the next."""
from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import OrderedDict
from typing import Any

import aiohttp
from ctxprec.collector.components import Deadline, cancelled
from ctxprec.collector.judging.labels import LabelIntake
from ctxprec.collector.model import Decision, Outcome
from ctxprec.collector.version import VERSION
from ctxprec.scorer.http_body import BodyTooLarge, read_text
from ctxprec.scorer.labels import Label

log = logging.getLogger("ctxprec.labels")

BATCH = 50
MAX_SPANS_PER_ROUND = 2000
MAX_ANSWER_BYTES = 8 * 1024 * 1024
TIMEOUT_S = 30.0
_SPAN_ID = re.compile(r"^[0-9a-f]{16}$")
_YES = {"relevant", "yes", "true", "1"}
_NO = {"irrelevant", "not relevant", "not_relevant", "no", "false", "0"}
_FIELDS = ("spanAnnotations { name annotatorKind label score metadata identifier } "
           "documentEvaluations { name annotatorKind label score documentPosition identifier }")


class PhoenixLabels:
    """A ResultSink (it remembers which spans were scored, and their documents' positions) and a
    component (the schedule)."""

    def __init__(self, url: str, intake: LabelIntake, *, interval_s: float, api_key: str | None = None,
                 capacity: int = 10_000) -> None:
        self.url = url.rstrip("/").removesuffix("/v1/traces")
        self.intake = intake
        self.interval_s = interval_s
        self.capacity = max(1, capacity)
        self.rounds = 0
        self.failures = 0
        # span id -> (trace id, each context's position in retrieval.documents, or None)
        self._scored: OrderedDict[str, tuple[str, tuple[int | None, ...]]] = OrderedDict()
        self._headers = {"Content-Type": "application/json", "Accept": "application/json",
                         "User-Agent": f"ctxprec/{VERSION}"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None

    def emit(self, outcome: Outcome) -> None:
        if outcome.decision is not Decision.EVALUATED or outcome.result is None:
            return
        r = outcome.retrieval
        if not _SPAN_ID.match(r.span_id) or not r.trace_id:
            return
        self._scored[r.span_id] = (r.trace_id, tuple(c.position for c in r.contexts))
        self._scored.move_to_end(r.span_id)
        while len(self._scored) > self.capacity:
            self._scored.popitem(last=False)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S), headers=self._headers)
        self._task = asyncio.create_task(self._schedule(), name="phoenix-labels")

    async def finish(self, deadline: Deadline) -> None:
        await cancelled(self._task)
        self._task = None

    async def close(self) -> None:
        await cancelled(self._task)
        self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _schedule(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.read_round()
            except Exception as error:  # logged; the next round tries again
                self.failures += 1
                log.warning("phoenix labels from %s: %s: %s", self.url, type(error).__name__, str(error)[:200])

    async def read_round(self) -> dict[str, int]:
        """One round: the human annotations on the recently scored spans, as labels."""
        spans = list(reversed(self._scored))[:MAX_SPANS_PER_ROUND]
        taken = {"matched": 0, "waiting": 0, "refused": 0}
        for start in range(0, len(spans), BATCH):
            batch = spans[start:start + BATCH]
            found = await self._ask(batch)
            for span_id, node in zip(batch, found):
                if node is None:
                    continue
                for label in self._labels(span_id, node):
                    outcome = self.intake.book.label(label)
                    taken[outcome.status] += 1
        self.rounds += 1
        if any(taken.values()):
            log.info("phoenix labels from %s: %d matched, %d waiting, %d refused", self.url, taken["matched"],
                     taken["waiting"], taken["refused"])
        return taken

    async def _ask(self, span_ids: list[str]) -> list[dict[str, Any] | None]:
        assert self._session is not None, "start() first"
        # The ids are 16 lowercase hex digits (checked when remembered): safe inside the query.
        query = "query HumanLabels {\n" + "\n".join(
            f'  s{i}: getSpanByOtelId(spanId: "{span_id}") {{ {_FIELDS} }}' for i, span_id in enumerate(span_ids)
        ) + "\n}"
        async with self._session.post(self.url + "/graphql", json={"query": query}) as response:
            try:
                text = await read_text(response, MAX_ANSWER_BYTES)
            except BodyTooLarge as error:
                raise RuntimeError(f"answer not read: {error}") from None
            if response.status >= 300:
                raise RuntimeError(f"HTTP {response.status}: {text[:200]}")
        payload = json.loads(text)
        if not isinstance(payload, dict) or not isinstance(payload.get("data"), dict):
            raise RuntimeError(f"unexpected answer: {text[:200]}")
        data = payload["data"]
        return [data.get(f"s{i}") if isinstance(data.get(f"s{i}"), dict) else None for i in range(len(span_ids))]

    def _labels(self, span_id: str, node: dict[str, Any]) -> list[Label]:
        trace_id, positions = self._scored.get(span_id, ("", ()))
        if not trace_id:
            return []
        labels = []
        for annotation in node.get("spanAnnotations") or []:
            if not isinstance(annotation, dict) or annotation.get("annotatorKind") != "HUMAN":
                continue
            metadata = annotation.get("metadata")
            relevant = metadata.get("relevant") if isinstance(metadata, dict) else None
            if isinstance(relevant, list) and relevant and all(isinstance(v, bool) for v in relevant):
                labels.append(Label(trace_id, span_id, tuple(relevant), annotator=_annotator(annotation)))
        for annotation in node.get("documentEvaluations") or []:
            if not isinstance(annotation, dict) or annotation.get("annotatorKind") != "HUMAN":
                continue
            position = annotation.get("documentPosition")
            relevant = _relevant(annotation)
            if not isinstance(position, int) or relevant is None:
                continue
            index = _index_of(position, positions)
            if index is None:  # not one of the contexts judged: nothing to compare it with
                continue
            labels.append(Label(trace_id, span_id, (relevant,), first=index, whole=False,
                                annotator=_annotator(annotation)))
        return labels


def _annotator(annotation: dict[str, Any]) -> str:
    name = str(annotation.get("name") or "")[:80]
    identifier = str(annotation.get("identifier") or "")[:80]
    return f"phoenix:{name}" + (f"/{identifier}" if identifier else "")


def _relevant(annotation: dict[str, Any]) -> bool | None:
    label = annotation.get("label")
    if isinstance(label, str):
        word = label.strip().lower()
        if word in _YES:
            return True
        if word in _NO:
            return False
    score = annotation.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        return score >= 0.5
    return None


def _index_of(position: int, positions: tuple[int | None, ...]) -> int | None:
    """The context at `position` of retrieval.documents (the same index when positions are unknown)."""
    if positions and all(p is not None for p in positions):
        return positions.index(position) if position in positions else None
    return position if 0 <= position < len(positions) else None
