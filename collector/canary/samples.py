"""The canary set: samples whose verdicts are known, in the batch event format (scorer/events.py)
plus `relevant`, one true/false per context in rank order:

    {"query": "...", "contexts": ["...", "..."], "output": "...", "relevant": [true, false]}

Without `--judge-canary` the small set shipped beside this module is used. The file is read
once, bounded in size; every bad line is named, and a file with any is refused at start (a
canary that silently judged fewer samples would be a weaker one than the user asked for)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ctxprec.scorer.events import EventError, json_error_text, parse_rag_event

MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_SAMPLES = 1000
DEFAULT_SET = "default_canary.jsonl"


@dataclass(frozen=True, slots=True)
class CanarySample:
    query: str
    contexts: tuple[str, ...]
    output: str | None
    expected_output: str | None
    relevant: tuple[bool, ...]  # the known verdicts, one per context


class CanaryFileError(ValueError):
    pass


def parse_canary_line(line: str, line_no: int) -> CanarySample:
    try:
        obj: Any = json.loads(line)
    except ValueError as exc:
        raise CanaryFileError(f"line {line_no}: not valid JSON ({json_error_text(exc)})") from None
    except RecursionError:
        raise CanaryFileError(f"line {line_no}: not valid JSON (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise CanaryFileError(f"line {line_no}: a canary sample must be a JSON object")
    relevant = obj.pop("relevant", None)
    try:
        event = parse_rag_event(obj)
    except EventError as exc:
        raise CanaryFileError(f"line {line_no}: {exc.message}") from None
    if not event.contexts:
        raise CanaryFileError(f"line {line_no}: 'contexts' is empty; a canary sample needs at least one context")
    if not isinstance(relevant, list) or not all(isinstance(v, bool) for v in relevant):
        raise CanaryFileError(f"line {line_no}: 'relevant' must be a list of true/false, one per context")
    if len(relevant) != len(event.contexts):
        raise CanaryFileError(f"line {line_no}: 'relevant' has {len(relevant)} values for "
                              f"{len(event.contexts)} contexts")
    return CanarySample(event.query, tuple(event.context_texts), event.output, event.expected_output,
                        tuple(relevant))


def parse_canary_text(text: str, source: str) -> list[CanarySample]:
    samples: list[CanarySample] = []
    problems: list[str] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            samples.append(parse_canary_line(line, line_no))
        except CanaryFileError as exc:
            problems.append(str(exc))
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise CanaryFileError(f"canary set {source}: " + "; ".join(problems[:5]) + more)
    if not samples:
        raise CanaryFileError(f"canary set {source}: no samples")
    if len(samples) > MAX_SAMPLES:
        raise CanaryFileError(f"canary set {source}: {len(samples)} samples; at most {MAX_SAMPLES} (each round "
                              "asks the judge for every one)")
    return samples


def load_canary(path: str | None) -> list[CanarySample]:
    """The user's canary set, or the shipped one when `path` is None. Raises CanaryFileError."""
    if path is None:
        text = resources.files(__package__).joinpath(DEFAULT_SET).read_text(encoding="utf-8")
        return parse_canary_text(text, "(shipped with ctxprec)")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise CanaryFileError(f"canary set {path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise CanaryFileError(f"canary set {path}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CanaryFileError(f"canary set {path}: not UTF-8 text (byte {exc.start})") from None
    return parse_canary_text(text, path)
