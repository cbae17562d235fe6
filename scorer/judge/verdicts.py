"""Strict reading of the judge's answer.

Tolerated around the one JSON object: a ```json fence, and prose before or after it; raw control
characters inside its strings; a verdict word in any case ("YES"); an index written as a string
of digits ("2"). Indices numbered from 1
(1..n for n contexts, 0 absent) are recognised and mapped back, never silently taken as the
neighbouring context's. Nothing else is guessed: an entry with a missing, duplicate or
out-of-range `context_index`, or a verdict that is neither "yes" nor "no", is reported, with
what was wrong in words the judge can be told (`VerdictParse.problem`), so that the caller
re-asks for those indices; it is never read as "no"."""
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
    one_based: bool = False  # the indices were numbered from 1 and were mapped back
    unclear_numbering: bool = False  # they may be numbered from 1 or not: nothing was taken
    shapes: list[str] = field(default_factory=list)  # entries that were not verdict objects, described
    bad_words: dict[int, str] = field(default_factory=dict)  # index -> the verdict it gave

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

    def problem(self) -> str:
        """What was wrong, said to the judge in a re-ask."""
        parts = []
        if self.unclear_numbering:
            parts.append("its context_index values looked numbered from 1; use the numbers given")
        if self.shapes:
            parts.append("each entry of \"verdicts\" must be an object with context_index, verdict and reason, "
                         f"not {self.shapes[0]}")
        if self.missing and not self.unclear_numbering:
            parts.append(f"it gave no verdict for context_index {', '.join(map(str, self.missing))}")
        if self.duplicate:
            parts.append(f"it gave more than one verdict for context_index {', '.join(map(str, self.duplicate))}")
        for index, word in sorted(self.bad_words.items())[:3]:
            parts.append(f"the verdict for context_index {index} was {word}, not \"yes\" or \"no\"")
        if self.out_of_range and not self.one_based:
            parts.append(f"context_index {', '.join(map(str, self.out_of_range[:5]))} was not asked for")
        return "; ".join(parts) + "." if parts else ""


# Stateless; building one per answer costs more than decoding it. strict=False: a raw newline
# inside a reason (which llama-cpp-python's grammar for a length-capped string lets through) is read.
_DECODER = json.JSONDecoder(strict=False)


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
    indexed: list[tuple[int, dict[str, Any]]] = []
    for entry in entries:
        if not isinstance(entry, dict):
            # Cannot be tied to an index; the index shows up as missing instead.
            result.shapes.append(_shape(entry))
            continue
        index = _index(entry.get("context_index"))
        if index is None:
            result.shapes.append("an object without a whole-number context_index")
            continue
        indexed.append((index, entry))
    answered = {index for index, _ in indexed}
    shift = _numbering(wanted, answered)
    if shift is None:
        result.unclear_numbering = True
        result.missing = sorted(wanted)
        return result
    result.one_based = shift == 1
    seen: dict[int, int] = {}
    candidates: dict[int, ParsedVerdict] = {}
    invalid: set[int] = set()
    for raw_index, entry in indexed:
        index = raw_index - shift
        if index not in wanted:
            result.out_of_range.append(raw_index)
            continue
        seen[index] = seen.get(index, 0) + 1
        verdict = entry.get("verdict")
        reason = entry.get("reason")
        word = verdict.strip().lower() if isinstance(verdict, str) else None
        if word not in ("yes", "no") or (reason is not None and not isinstance(reason, str)):
            invalid.add(index)
            if word not in ("yes", "no"):
                result.bad_words[index] = "missing" if verdict is None else json.dumps(verdict)[:40]
            continue
        candidates[index] = ParsedVerdict(index, word == "yes", (reason or "").strip())
    result.duplicate = sorted(i for i, n in seen.items() if n > 1)
    result.invalid = sorted(invalid - set(result.duplicate))
    result.missing = sorted(wanted - set(seen))
    result.verdicts = {i: v for i, v in candidates.items() if seen[i] == 1 and i not in invalid}
    return result


def _index(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _numbering(wanted: set[int], answered: set[int]) -> int | None:
    """For contexts 0..n-1 asked for: 0 when the answer uses those indices, 1 when it numbered
    them from 1 (every index within 1..n, 0 absent, n present), None when it cannot be told (within
    1..n and 0 absent, but no n to show it). Other sets (a re-ask's) are taken as given."""
    if not answered or 0 in answered or wanted != set(range(len(wanted))):
        return 0
    if not answered <= {index + 1 for index in wanted}:
        return 0
    return 1 if max(wanted) + 1 in answered else None


def _shape(entry: object) -> str:
    if isinstance(entry, bool):
        return "true or false"
    if isinstance(entry, (int, float)):
        return f"a bare number ({entry})"
    if isinstance(entry, str):
        return f"a bare string ({json.dumps(entry)[:40]})"
    if isinstance(entry, list):
        return "a list"
    return "null"


def parse_reason(text: str) -> str:
    """The `reason` string of a reason-task answer. Raises MalformedAnswer."""
    reason = extract_json_object(text).get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise MalformedAnswer('the answer has no non-empty "reason" string')
    return reason.strip()
