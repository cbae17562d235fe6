"""Files of RAG events for `ctxprec score`: JSON Lines or CSV, told apart by the file's extension
(.jsonl/.ndjson/.json, .csv) or else by its first bytes (a JSON object starts with `{`). Both
readers stream and give `RawEvent`s that the batch validates with the same parser."""
from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field
from typing import IO, Iterable, Iterator

from ctxprec.scorer.event_csv import CsvEvents, CsvHeaderError
from ctxprec.scorer.events import RawEvent, json_error_text

JSONL_EXTENSIONS = (".jsonl", ".ndjson", ".json")
CSV_EXTENSIONS = (".csv",)
_SNIFF_BYTES = 4096
# Above this share of bytes that no text file holds (NUL, control characters, invalid UTF-8), the
# file is binary: a CSV reader would only say "line contains NUL" about it.
_BINARY_SHARE = 0.05


class EventFileError(Exception):
    """The file cannot be read at all (missing, a directory, a broken CSV header)."""


@dataclass
class EventFile:
    path: str
    kind: str  # "jsonl" | "csv"
    events: Iterator[RawEvent]
    notes: list[str] = field(default_factory=list)  # about the file as a whole (e.g. its header)
    handle: IO[bytes] | None = None
    has_header: bool = False  # a CSV file whose header row was read

    @property
    def key_noun(self) -> str:
        """What a field name is called in this kind of file, for messages."""
        return "column" if self.kind == "csv" else "key"

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()

    def nonempty_events(self) -> Iterator[RawEvent]:
        """The events, once the first is found; EventFileError when the file holds none (empty,
        blank lines only, or a CSV header row alone)."""
        first = next(self.events, None)
        if first is None:
            what = "a header row and no rows" if self.has_header else "no events (it is empty or blank)"
            raise EventFileError(f"{self.path}: holds {what}; nothing to score")
        return itertools.chain((first,), self.events)


def open_event_file(path: str) -> EventFile:
    if os.path.isdir(path):
        raise EventFileError(f"{path}: is a directory, expected a JSONL or CSV file of RAG events")
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise EventFileError(f"{path}: no such file") from None
    except OSError as exc:
        raise EventFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        # peek, not read: a pipe (`<(zcat events.csv.gz)`) cannot be rewound.
        head = handle.peek(_SNIFF_BYTES)[:_SNIFF_BYTES]
        if looks_binary(head):
            raise EventFileError(f"{path}: neither CSV nor JSON Lines: it holds binary data (a compressed or "
                                 "spreadsheet file? export it as CSV or JSONL first)")
        kind = detect_kind(path, head)
        if kind == "jsonl":
            return EventFile(path, kind, jsonl_events(numbered_lines(handle)), handle=handle)
        table = CsvEvents(numbered_lines(handle))
        return EventFile(path, kind, iter(table), notes=table.notes, handle=handle, has_header=bool(table.columns))
    except EventFileError:
        handle.close()
        raise
    except CsvHeaderError as exc:
        handle.close()
        raise EventFileError(f"{path}: {exc}") from None
    except OSError as exc:
        handle.close()
        raise EventFileError(f"{path}: cannot read ({exc.strerror or exc})") from None


def looks_binary(head: bytes) -> bool:
    """Whether the first bytes of a file are not text: a NUL, or more than a few bytes that are
    control characters or not UTF-8 (a line or two of bad UTF-8 in a text file is not enough: those
    lines get error records and the rest is scored)."""
    if not head:
        return False
    if b"\x00" in head:
        return True
    text = head.decode("utf-8", "replace")
    if text.endswith("\ufffd"):  # a character cut by the sniffing window, not a bad one
        text = text.rstrip("\ufffd")
    odd = sum(1 for ch in text if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r\f"))
    return odd > _BINARY_SHARE * max(len(text), 1)


def detect_kind(path: str, head: bytes) -> str:
    """"jsonl" or "csv": by extension when it says, else by the first non-blank byte."""
    lowered = path.lower()
    if lowered.endswith(JSONL_EXTENSIONS):
        return "jsonl"
    if lowered.endswith(CSV_EXTENSIONS):
        return "csv"
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return "jsonl" if not start or start[:1] in (b"{", b"[") else "csv"


def numbered_lines(source: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(source, start=1):
        yield number, raw.rstrip(b"\r\n")


def jsonl_events(lines: Iterable[tuple[int, bytes]]) -> Iterator[RawEvent]:
    """One JSON value per line; blank lines are skipped."""
    for line_no, raw in lines:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield RawEvent(line_no, error=f"not valid UTF-8 (byte {exc.start})", text=raw.hex()[:64])
            continue
        if line_no == 1:
            text = text.lstrip("\ufeff")  # editors on Windows start files with a byte-order mark
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except RecursionError:
            yield RawEvent(line_no, error="not valid JSON (nested too deeply)", text=text)
            continue
        except ValueError as exc:
            yield RawEvent(line_no, error=f"not valid JSON ({json_error_text(exc)})", text=text)
            continue
        yield RawEvent(line_no, value=value, text=text)


def count_events(path: str, kind: str) -> int | None:
    """For the progress bar's ETA only: lines (less a CSV header), counted in a fast pass over the
    bytes. None for what cannot be read twice (a pipe) or at all."""
    if not os.path.isfile(path):
        return None
    try:
        count = 0
        last = b"\n"
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                count += chunk.count(b"\n")
                last = chunk[-1:]
    except OSError:
        return None
    lines = count + (0 if last == b"\n" else 1)
    return max(lines - 1, 0) if kind == "csv" else lines
