"""Strict reading of the judge's answer.

Tolerated around the one JSON object: a ```json fence, and prose before or after it. Nothing
else is guessed: an entry with a missing, duplicate or out-of-range `context_index`, or a
verdict that is neither "yes" nor "no", is reported so that the caller re-asks for those
indices; it is never read as "no"."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Collection

_FENCE_RE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\r?\n?(.*?)```", re.DOTALL)


class MalformedAnswer(ValueError):
    """The answer holds no single readable JSON object of the expected shape."""


@dataclass(frozen=True, slots=True)
class ParsedVerdict:
    index: int
    relevant: bool
    reason: str


@dataclass(slots=True)
class VerdictParse:
    verdicts: dict[int, ParsedVerdict] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)
    duplicate: list[int] = field(default_factory=list)
    out_of_range: list[int] = field(default_factory=list)
    invalid: list[int] = field(default_factory=list)  # verdict not yes/no, or a bad entry

    @property
    def unresolved(self) -> list[int]:
        """Expected indices without a usable verdict: what a re-ask must cover."""
        return sorted(set(self.missing) | set(self.duplicate) | set(self.invalid))

    def describe(self) -> str:
        parts = []
        for label, values in (
            ("missing", self.missing),
            ("duplicate", self.duplicate),
            ("invalid verdict", self.invalid),
            ("out of range", self.out_of_range),
        ):
            if values:
                parts.append(f"{label} {sorted(values)}")
        return ", ".join(parts) or "complete"


_DECODER = json.JSONDecoder()  # stateless; building one per answer costs more than decoding it


def extract_json_object(text: str) -> dict[str, Any]:
    """The one JSON object in `text` (fenced or surrounded by prose). Raises MalformedAnswer."""
    if not isinstance(text, str) or not text.strip():
        raise MalformedAnswer("the answer is empty")
    fences = _FENCE_RE.findall(text)
    if len(fences) > 1:
        raise MalformedAnswer("the answer holds more than one fenced block")
    body = fences[0] if fences else text
    start = body.find("{")
    if start < 0:
        raise MalformedAnswer("the answer holds no JSON object")
    try:
        obj, end = _DECODER.raw_decode(body, start)
    except json.JSONDecodeError as exc:
        raise MalformedAnswer(f"the answer's JSON does not parse ({exc.msg} at char {exc.pos})") from None
    except RecursionError:
        raise MalformedAnswer("the answer's JSON is nested too deeply") from None
    if "{" in body[end:]:
        raise MalformedAnswer("the answer holds more than one JSON object")
    if not isinstance(obj, dict):
        raise MalformedAnswer("the answer's JSON is not an object")
    return obj


def parse_verdicts(text: str, expected: Collection[int]) -> VerdictParse:
    """Read verdicts for the `expected` context indices. Raises MalformedAnswer when there is no
    `{"verdicts": [...]}` object at all (a judge-level fault worth retrying)."""
    obj = extract_json_object(text)
    entries = obj.get("verdicts")
    if not isinstance(entries, list):
        raise MalformedAnswer('the answer has no "verdicts" list')
    wanted = set(expected)
    result = VerdictParse()
    seen: dict[int, int] = {}
    candidates: dict[int, ParsedVerdict] = {}
    invalid: set[int] = set()
    for entry in entries:
        if not isinstance(entry, dict):
            continue  # cannot be tied to an index; the index shows up as missing instead
        index = entry.get("context_index")
        if isinstance(index, bool) or not isinstance(index, int):
            continue
        if index not in wanted:
            result.out_of_range.append(index)
            continue
        seen[index] = seen.get(index, 0) + 1
        verdict = entry.get("verdict")
        reason = entry.get("reason")
        word = verdict.strip().lower() if isinstance(verdict, str) else None
        if word not in ("yes", "no") or (reason is not None and not isinstance(reason, str)):
            invalid.add(index)
            continue
        candidates[index] = ParsedVerdict(index, word == "yes", (reason or "").strip())
    result.duplicate = sorted(i for i, n in seen.items() if n > 1)
    result.invalid = sorted(invalid - set(result.duplicate))
    result.missing = sorted(wanted - set(seen))
    result.verdicts = {i: v for i, v in candidates.items() if seen[i] == 1 and i not in invalid}
    return result


def parse_reason(text: str) -> str:
    """The `reason` string of a reason-task answer. Raises MalformedAnswer."""
    reason = extract_json_object(text).get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise MalformedAnswer('the answer has no non-empty "reason" string')
    return reason.strip()
