"""RAG events from a CSV file: a header row names the columns (event fields or their aliases, as in
scorer/events.py), every further row is one event. Cells are text; the cells of list fields
(`contexts` and its aliases) hold a JSON array, `attributes` a JSON object, `timestamp` RFC 3339
text or epoch seconds. An empty cell is an absent field.

Rows are read as they come, so a file of any size streams. A row that cannot be read becomes a
`RawEvent` with an error that names the line and the column; the rows around it are unaffected."""
from __future__ import annotations

import ast
import csv
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ctxprec.scorer.events import ALIAS_OF, EVENT_FIELDS, RawEvent, quoted

# Contexts are whole documents: csv's default limit of 128 KiB per cell would reject real ones.
# The limit is process-wide in the csv module, so it is only ever raised, never lowered.
_CELL_LIMIT = 256 * 1024 * 1024
# A record this many lines long is most likely a quote left open that swallowed the rows below.
_LONG_RECORD_LINES = 50
_WHOLE_NUMBER = re.compile(r"-?[0-9]+")


class CsvHeaderError(ValueError):
    """The header row cannot name the columns: the file as a whole cannot be read."""


@dataclass(frozen=True, slots=True)
class CsvColumn:
    name: str
    event_field: str | None  # the event field it fills, None for a column that is not one

    @property
    def kind(self) -> str:
        """How its cells are read: list, object, time or text."""
        return {"contexts": "list", "attributes": "object", "timestamp": "time"}.get(self.event_field or "", "text")


class CellError(ValueError):
    pass


@dataclass
class CsvEvents:
    """Iterate to get the events; `columns` and `notes` (about the header) are ready at once."""

    lines: Iterable[tuple[int, bytes]]
    columns: tuple[CsvColumn, ...] = ()
    notes: list[str] = field(default_factory=list)
    header_line: int = 0

    def __post_init__(self) -> None:
        if csv.field_size_limit() < _CELL_LIMIT:
            csv.field_size_limit(_CELL_LIMIT)
        self._bad_utf8: dict[int, int] = {}  # line -> byte offset of its first invalid byte
        self._reader = csv.reader(self._text_lines(self.lines))
        self._read_header()

    def _text_lines(self, lines: Iterable[tuple[int, bytes]]) -> Iterator[str]:
        """Physical lines as text. Invalid UTF-8 is kept as surrogates rather than raised here, so
        that the csv reader keeps its place; the row holding it is turned into an error."""
        for number, raw in lines:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                self._bad_utf8[number] = exc.start
                text = raw.decode("utf-8", "surrogateescape")
            if number == 1:
                text = text.lstrip("\ufeff")  # spreadsheet exports often start with a byte-order mark
            yield text + "\n"

    def _read_header(self) -> None:
        while True:
            try:
                row = next(self._reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise CsvHeaderError(f"line {self._reader.line_num}: the header row is not valid CSV ({exc})") from None
            if _blank(row):
                continue
            self.header_line = self._reader.line_num
            if self._bad_utf8:
                raise CsvHeaderError(f"line {self.header_line}: the header row is not valid UTF-8")
            self.columns = _columns(row, self.notes)
            return

    def __iter__(self) -> Iterator[RawEvent]:
        if not self.columns:
            return
        while True:
            start = self._reader.line_num + 1
            try:
                row = next(self._reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield RawEvent(start, error=f"not valid CSV ({exc})", text=f"csv line {start}")
                continue
            end = self._reader.line_num
            if _blank(row):
                continue
            yield self._event(row, start, end)

    def _event(self, row: list[str], start: int, end: int) -> RawEvent:
        text = json.dumps(row)  # ASCII: a row with invalid UTF-8 holds surrogates that cannot be encoded
        bad = [(n, self._bad_utf8.pop(n)) for n in sorted(self._bad_utf8) if n <= end]
        if bad:
            line, byte = bad[0]
            return RawEvent(start, error=f"not valid UTF-8 (line {line}, byte {byte})", text=text)
        # A quote left open swallows the rows below it into one cell: say where the row ended.
        hint = f" (the row runs to line {end}: is a quote left open?)" if end - start + 1 >= _LONG_RECORD_LINES else ""
        if len(row) != len(self.columns):
            return RawEvent(
                start, error=f"the row has {len(row)} cells but the header names {len(self.columns)} columns{hint}", text=text
            )
        value: dict[str, Any] = {}
        problem: str | None = None
        for column, cell in zip(self.columns, row):
            if not column.name:
                continue
            try:
                value[column.name] = read_cell(column, cell)
            except CellError as exc:
                value[column.name] = cell
                problem = problem or f"column '{column.name}': {exc}{hint}"
        return RawEvent(start, value=value, error=problem, text=text)


def _blank(row: list[str]) -> bool:
    return not any(cell.strip() for cell in row)


def _columns(header: list[str], notes: list[str]) -> tuple[CsvColumn, ...]:
    seen: dict[str, int] = {}
    columns = []
    for position, raw in enumerate(header, start=1):
        name = raw.strip()
        if not name:
            # pandas' to_csv writes its row index as a column without a name.
            notes.append(f"column {position} has no name (a row index?); ignored")
        elif name in seen:
            raise CsvHeaderError(f"the header names column '{name}' twice (columns {seen[name]} and {position})")
        else:
            seen[name] = position
        field_name = name if name in EVENT_FIELDS else ALIAS_OF.get(name)
        columns.append(CsvColumn(name, field_name))
    missing = [f for f in ("query", "contexts") if not any(c.event_field == f for c in columns)]
    if missing:
        known = [c.name for c in columns if c.name]
        notes.append(
            f"the header has no column for {quoted(missing)}"
            + (f" (columns: {quoted(known)})" if known else "")
            + "; every row will fail"
        )
    return tuple(columns)


def read_cell(column: CsvColumn, cell: str) -> Any:
    """The JSON value a cell stands for; "" is an absent field (None)."""
    if cell == "" or (column.kind != "text" and not cell.strip()):
        return None
    if column.kind == "list":
        return _list_cell(cell)
    if column.kind == "object":
        return _object_cell(cell)
    if column.kind == "time":
        return _time_cell(cell)
    return cell


def _list_cell(cell: str) -> list[Any]:
    text = cell.strip()
    if not text.startswith("["):
        raise CellError(f'expected a JSON array such as ["first context", "second context"], got {text[:40]!r}')
    try:
        value = json.loads(text)
    except RecursionError:
        raise CellError("not a JSON array (nested too deeply)") from None
    except ValueError as exc:
        value = _python_list(text)
        if value is None:
            raise CellError(f"not a JSON array ({getattr(exc, 'msg', exc)} at character {getattr(exc, 'pos', '?')})") from None
    if not isinstance(value, list):
        raise CellError("expected a JSON array")
    return value


def _python_list(text: str) -> list[Any] | None:
    """A list written as Python shows it (['a', "b's"]), which is what pandas' to_csv writes for a
    column of lists, e.g. a Ragas dataset's retrieved_contexts. Literals only: nothing is run."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, list) else None


def _object_cell(cell: str) -> dict[str, Any]:
    try:
        value = json.loads(cell)
    except RecursionError:
        raise CellError("not a JSON object (nested too deeply)") from None
    except ValueError as exc:
        raise CellError(f"not a JSON object ({getattr(exc, 'msg', exc)})") from None
    if not isinstance(value, dict):
        raise CellError('expected a JSON object such as {"retriever": "kb-v2"}')
    return value


def _time_cell(cell: str) -> str | int | float:
    """Epoch seconds come out of a spreadsheet as digits; RFC 3339 text stays text (the event
    parser checks both)."""
    text = cell.strip()
    try:
        return int(text) if _WHOLE_NUMBER.fullmatch(text) else _finite(float(text), text)
    except ValueError:  # not a number, or too many digits for int()
        return text


def _finite(number: float, text: str) -> float | str:
    return number if math.isfinite(number) else text
