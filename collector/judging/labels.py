"""People's labels in: `POST /labels` on the metrics listener, `--labels-file` (re-read when it
changes), both matched in a `LabelBook` (scorer/labels.py) against the verdicts the judge gave,
which `VerdictRecorder` (a ResultSink) keeps for the most recent scored retrievals.

Every comparison goes to the agreement registry (agreement.py) as `against="human"` under the
fingerprint of the judge that gave the verdicts. Another judge judging the same retrievals (a
shadow) records its verdicts with `book.verdicts(trace_id, span_id, its_fingerprint, verdicts)`
and is compared with the same labels."""
from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Iterable

from ctxprec.collector.components import Deadline, Stateless, cancelled
from ctxprec.collector.diagnostics.views import JsonResponse
from ctxprec.collector.judging.agreement import JudgeAgreement
from ctxprec.collector.model import Decision, Outcome
from ctxprec.scorer.labels import Label, LabelBook, LabelError, parse_lines

log = logging.getLogger("ctxprec.labels")

# The body's media types taken; JSON lines have no registered one, so the common spellings.
MEDIA_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines", "application/json",
               "text/plain", "")
MAX_REFUSED_SHOWN = 100  # refused lines listed in an answer (all are counted)
MAX_FILE_BYTES = 64 * 1024 * 1024
FILE_POLL_S = 1.0


@dataclass(slots=True)
class Taken:
    matched: int = 0
    waiting: int = 0
    refused_count: int = 0

    def as_answer(self, refused: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"matched": self.matched, "waiting": self.waiting, "refused": refused}
        if self.refused_count > len(refused):
            body["refused_not_listed"] = self.refused_count - len(refused)
        return body


class LabelIntake:
    """The label book wired to the agreement registry; takes label lines from any source."""

    def __init__(self, registry: JudgeAgreement, *, verdict_capacity: int, max_waiting: int, wait_s: float) -> None:
        self.registry = registry
        self.book = LabelBook(verdict_capacity=verdict_capacity, max_waiting=max_waiting, wait_s=wait_s,
                              on_pairs=self._pairs, on_unmatched=registry.count_unmatched)
        registry.add_section("labels", self.book.stats)

    def _pairs(self, judge: str, added: list[tuple[bool, bool]], removed: list[tuple[bool, bool]],
               annotator: str) -> None:
        self.registry.apply(judge, "human", added, removed, annotator or None)

    def take(self, lines: Iterable[bytes | str]) -> tuple[Taken, list[dict[str, Any]]]:
        taken, refused = Taken(), []
        for number, parsed in parse_lines(lines):
            if isinstance(parsed, LabelError):
                reason = str(parsed)
            else:
                outcome = self.book.label(parsed)
                if outcome.status == "matched":
                    taken.matched += 1
                    continue
                if outcome.status == "waiting":
                    taken.waiting += 1
                    continue
                reason = outcome.reason
            taken.refused_count += 1
            if len(refused) < MAX_REFUSED_SHOWN:
                refused.append({"line": number, "reason": reason})
        return taken, refused

    def post(self, body: bytes, content_type: str) -> JsonResponse:
        """`POST /labels`: JSON lines; 200 with what each came to (a bad line never loses the good ones)."""
        media = content_type.split(";", 1)[0].strip().lower()
        if media not in MEDIA_TYPES:
            return JsonResponse(415, {"error": f"send JSON lines as application/x-ndjson, got {media[:60]!r}"})
        taken, refused = self.take(body.splitlines())
        return JsonResponse(200, taken.as_answer(refused))


class VerdictRecorder(Stateless):
    """A `ResultSink`: the verdicts of every scored retrieval into the label book, under the live
    judge's fingerprint."""

    def __init__(self, book: LabelBook, judge: str) -> None:
        self.book = book
        self.judge = judge

    def emit(self, outcome: Outcome) -> None:
        result = outcome.result
        if outcome.decision is not Decision.EVALUATED or result is None:
            return
        r = outcome.retrieval
        if not r.trace_id or not r.span_id:
            return
        ordered = sorted(result.verdicts, key=lambda v: v.index)
        self.book.verdicts(r.trace_id, r.span_id, self.judge, [v.relevant for v in ordered])


class LabelsFile:
    """`--labels-file`: read at start, and again whenever its size or modification time changes
    (an editor's save, an export job's rewrite, lines appended). Lines appended to what was read
    are read alone; a file rewritten is read whole again, which counts nothing twice (a label for a
    context and annotator already taken replaces it), though labels whose verdicts were evicted
    meanwhile are counted as evicted again. Each read logs what it came to and the first refused
    lines."""

    def __init__(self, path: str, intake: LabelIntake, *, poll_s: float = FILE_POLL_S) -> None:
        self.path = path
        self.intake = intake
        self.poll_s = poll_s
        self.reads = 0
        self._seen: tuple[int, int] | None = None
        self._done = 0  # bytes read up to the end of the last whole line
        self._done_hash = hashlib.sha256(b"").digest()
        self._done_lines = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.read_if_changed()
        self._task = asyncio.create_task(self._watch(), name="labels-file")

    async def finish(self, deadline: Deadline) -> None:
        await cancelled(self._task)
        self._task = None

    async def close(self) -> None:
        await cancelled(self._task)
        self._task = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                await self.read_if_changed()
            except Exception:  # a bad read must not end the watch: the next change is read again
                log.exception("labels file %s: reading failed", self.path)

    async def read_if_changed(self) -> bool:
        try:
            stat = os.stat(self.path)
        except OSError as error:
            if self._seen is not None:
                log.warning("labels file %s: %s; the labels already read are kept", self.path, error.strerror)
                self._seen = None
            return False
        seen = (stat.st_size, stat.st_mtime_ns)
        if seen == self._seen:
            return False
        self._seen = seen
        if stat.st_size > MAX_FILE_BYTES:
            log.error("labels file %s: %d bytes, over the limit of %d; not read", self.path, stat.st_size,
                      MAX_FILE_BYTES)
            return False
        data = await asyncio.to_thread(_read, self.path, MAX_FILE_BYTES)
        start, first_line = 0, 0
        if self._done and len(data) >= self._done and hashlib.sha256(data[:self._done]).digest() == self._done_hash:
            start, first_line = self._done, self._done_lines  # appended to: only the new lines
        part = data[start:]
        lines = part.splitlines()
        taken, refused = self.intake.take(lines)
        for row in refused:
            row["line"] += first_line
        # Up to the last whole line: a line still being written is read again, whole, next time.
        whole = part.rfind(b"\n") + 1
        self._done = start + whole
        self._done_hash = hashlib.sha256(data[:self._done]).digest()
        self._done_lines = first_line + part[:whole].count(b"\n")
        self.reads += 1
        shown = "; ".join(f"line {r['line']}: {r['reason']}" for r in refused[:5])
        log.info("labels file %s: %d labels matched, %d waiting for verdicts, %d refused%s", self.path,
                 taken.matched, taken.waiting, taken.refused_count, f" ({shown})" if shown else "")
        return True


def _read(path: str, limit: int) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(limit + 1)[:limit]


__all__ = ["Label", "LabelIntake", "LabelsFile", "VerdictRecorder"]
