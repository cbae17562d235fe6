"""Reading score records (docs/FORMATS.md) for the report. Lines that are not score records are
set aside with a message naming the line, never fatal: the report shows what could be read."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, IO

MAX_PROBLEMS_KEPT = 50


@dataclass
class LoadedRecords:
    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the first MAX_PROBLEMS_KEPT
    problem_count: int = 0
    lines: int = 0

    def problem(self, message: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS_KEPT:
            self.problems.append(message)


def load_records(stream: IO[bytes]) -> LoadedRecords:
    loaded = LoadedRecords()
    for number, raw in enumerate(stream, start=1):
        loaded.lines = number
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            loaded.problem(f"line {number}: not valid UTF-8")
            continue
        if number == 1:
            text = text.lstrip("\ufeff")
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError as exc:
            loaded.problem(f"line {number}: not valid JSON ({getattr(exc, 'msg', exc)})")
            continue
        problem = check_record(obj)
        if problem:
            loaded.problem(f"line {number}: {problem}")
            continue
        loaded.records.append(obj)
    return loaded


def check_record(obj: Any) -> str | None:
    """Why `obj` is not a usable score record, or None. Only what the report reads is checked."""
    if not isinstance(obj, dict):
        return "not a score record (expected a JSON object)"
    if "score" not in obj or ("error" not in obj and "scored_at" not in obj):
        if "query" in obj and "contexts" in obj:
            return "this is a RAG event, not a score record (run 'ctxprec score' on it first)"
        return "not a score record (no 'score' field)"
    score = obj["score"]
    error = obj.get("error")
    if error is not None:
        if not isinstance(error, dict) or not isinstance(error.get("type"), str):
            return "'error' must be null or an object with a 'type'"
        return None
    if not _is_number(score):
        return "'score' must be a number when 'error' is null"
    scale = obj.get("scale", 1)
    if not _is_number(scale) or scale < 0:
        return "'scale' must be a number >= 0"
    verdicts = obj.get("verdicts", [])
    if not isinstance(verdicts, list) or not all(
        isinstance(v, dict) and isinstance(v.get("index"), int) and isinstance(v.get("relevant"), bool) for v in verdicts
    ):
        return "'verdicts' must be a list of {index, relevant, reason}"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
