"""The CSV reader on its own: any bytes give events or errors that name the line, never an
exception (other than a header that cannot name the columns), and every line of the file is
accounted for."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxprec.scorer.event_csv import CsvEvents, CsvHeaderError
from ctxprec.scorer.event_files import detect_kind, numbered_lines
from ctxprec.scorer.events import EventError, parse_rag_event_with_notes

FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def read(data: bytes) -> CsvEvents:
    import io

    return CsvEvents(numbered_lines(io.BytesIO(data)))


cells = st.one_of(
    st.text(max_size=30),
    st.sampled_from(['["a", "b"]', "['a', 'b']", "[", "[1, {}]", "{}", '{"retriever": "kb"}', "1764000000", "-5",
                     "2026-11-29T12:00:00Z", '"', '""', "\r", "\x00", "[" * 200]),
)
rows = st.lists(st.lists(cells, min_size=0, max_size=6), max_size=6)
headers = st.lists(st.sampled_from(["query", "contexts", "question", "retrieved_contexts", "answer", "timestamp",
                                    "attributes", "trace_id", "notes", ""]), min_size=1, max_size=6)


def _csv_line(row: list[str]) -> str:
    return ",".join('"' + c.replace('"', '""') + '"' if any(ch in c for ch in ',"\n\r') else c for c in row)


@FUZZ
@given(headers, rows)
@example(["query", "contexts"], [["q", "[" * 5000]])
@example(["query", "contexts"], [["q", "[" + "[" * 3000 + "]" * 3001]])
def test_any_table_gives_events_or_errors_that_name_the_line(header: list[str], body: list[list[str]]) -> None:
    data = ("\n".join(_csv_line(r) for r in [header, *body]) + "\n").encode("utf-8", "surrogatepass")
    try:
        table = read(data)
    except CsvHeaderError as exc:
        assert "twice" in str(exc) or "not valid CSV" in str(exc)
        return
    last_line = data.count(b"\n")
    for raw in table:
        assert 1 < raw.line_no <= last_line
        if raw.error is not None:
            assert raw.error
            continue
        try:
            parse_rag_event_with_notes(raw.value, strict=True)
        except EventError as exc:
            assert exc.message


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_give_events_or_errors(data: bytes) -> None:
    try:
        table = read(data)
    except CsvHeaderError:
        return
    for raw in table:
        assert raw.line_no >= 2  # the header is line 1
        # Every row is an event or a non-empty error that says why (never a silent blank).
        assert isinstance(raw.value, dict) if raw.error is None else isinstance(raw.error, str) and raw.error.strip()
        json.dumps(raw.text)  # the error record's id is made from it


def test_cells_are_read_by_the_field_they_fill() -> None:
    header = "trace_id,question,retrieved_contexts,answer,attributes,timestamp,notes\n"
    row = "AB" * 16 + ',q?,"[""one"", ""two""]",,"{""retriever"": ""kb""}",1764000000,\n'
    data = (header + row).encode()
    (raw,) = list(read(data))
    assert raw.error is None and raw.line_no == 2
    assert raw.value == {
        "trace_id": "AB" * 16, "question": "q?", "retrieved_contexts": ["one", "two"], "answer": None,
        "attributes": {"retriever": "kb"}, "timestamp": 1764000000, "notes": None,
    }
    event = parse_rag_event_with_notes(raw.value).event
    assert (event.trace_id, event.query, event.context_texts, event.output, event.retriever) == (
        "ab" * 16, "q?", ["one", "two"], None, "kb")


def test_a_quote_left_open_says_where_the_row_ends() -> None:
    lines = ["query,contexts", 'q,"[""a""]', *[f"q{i},[]" for i in range(60)]]
    (raw,) = list(read(("\n".join(lines) + "\n").encode()))
    assert raw.line_no == 2
    assert "is a quote left open?" in raw.error and "line 62" in raw.error


def test_header_with_a_byte_order_mark_and_blank_lines_first() -> None:
    data = "\ufeff\n\nquery,contexts\nq,[]\n".encode("utf-8")
    table = read(data)
    assert [c.name for c in table.columns] == ["query", "contexts"] and table.header_line == 3
    (raw,) = list(table)
    assert raw.line_no == 4 and raw.value == {"query": "q", "contexts": []}


def test_duplicate_column_is_a_header_error() -> None:
    with pytest.raises(CsvHeaderError, match="names column 'answer' twice"):
        read(b"query,answer,contexts,answer\n")


@pytest.mark.parametrize(
    ("path", "head", "kind"),
    [
        ("a.jsonl", b"query,contexts", "jsonl"),
        ("a.CSV", b'{"query": 1}', "csv"),
        ("a.txt", b'\xef\xbb\xbf  {"query": "q"}', "jsonl"),
        ("a.txt", b"\n\n[1]", "jsonl"),
        ("a.txt", b"user_input,retrieved_contexts", "csv"),
        ("/dev/fd/63", b"", "jsonl"),
    ],
)
def test_kind_by_extension_then_content(path: str, head: bytes, kind: str) -> None:
    assert detect_kind(path, head) == kind
