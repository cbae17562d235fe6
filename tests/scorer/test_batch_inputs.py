"""`ctxprec score` on the datasets people already have: Ragas, DeepEval and question/answer files,
in JSONL and CSV, through the installed console script in its own process. The judge is the stub
judge over real HTTP (its verdicts follow a documented rule, and it shows what it was asked) or
the local judge."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.events import parse_rfc3339
from ctxprec.scorer.records import RECORD_FIELDS
from tests.scorer.test_batch_cli import ctxprec, expected_map, judge_args, read_records, write_lines

# The stub judge's rule: without markers, a context is relevant iff it shares a content word (4+
# letters, not a stopword) with the reference. These texts make the answer and the question
# pick different contexts, so what a sample was judged against shows in its verdicts.
QUESTION = "What is the refund window?"
CONTEXTS = ["Refund window rules are listed on the policy page.", "Returns are accepted within thirty days."]
ANSWER = "Thirty days after delivery."
AGAINST_ANSWER = [False, True]  # only the second context shares words with the answer
AGAINST_QUESTION = [True, False]  # only the first shares words with the question


def judge_payloads(stub: StubJudge) -> list[dict[str, Any]]:
    """The data block of every verdicts request the stub judge received, in order."""
    payloads = []
    for request in stub.recent:
        if not request.body:
            continue
        user = [m["content"] for m in request.body["messages"] if m["role"] == "user"][-1]
        lines = user.splitlines()
        payloads.append(json.loads(lines[lines.index("BEGIN_DATA") + 1]))
    return payloads


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "warning:" in line]


# --- the answer under another name -----------------------------------------------------------------


async def test_answer_keyed_file_is_judged_against_the_answer(stub_judge: StubJudge, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "qa.jsonl", [json.dumps({"query": QUESTION, "contexts": CONTEXTS, "answer": ANSWER})])

    done = await ctxprec("score", str(source), *judge_args(stub_judge))

    assert done.rc == 0, done.stderr
    (record,) = read_records(done.stdout)
    assert record["reference_kind"] == "output" and record["answer_source"] == "event"
    assert [v["relevant"] for v in record["verdicts"]] == AGAINST_ANSWER
    assert record["score"] == expected_map(AGAINST_ANSWER)
    (payload,) = judge_payloads(stub_judge)
    assert (payload["reference_kind"], payload["reference"]) == ("output", ANSWER)
    assert "reading key 'answer' as 'output' (from line 1)" in done.stderr
    assert warning_lines(done.stderr) == []


async def test_answer_keyed_file_scores_as_the_same_file_with_output(tmp_path: Path) -> None:
    """With the local judge: `answer` gives exactly what `output` gives, and not what the question alone gives."""
    events = [
        {"query": "How long do password reset links last?",
         "contexts": ["Office hours are 9 to 5 on weekdays.", "Password reset links expire after one hour.",
                      "Reset your password from the account page."],
         "answer": "They expire after one hour."},
        {"query": "What is the refund window?",
         "contexts": ["The refund window policy page.", "Refunds are accepted within 30 days of purchase."],
         "answer": "Within 30 days of purchase."},
    ]
    aliased = write_lines(tmp_path / "answer.jsonl", [json.dumps(e) for e in events])
    canonical = write_lines(tmp_path / "output.jsonl", [json.dumps(_renamed(e, "answer", "output")) for e in events])
    no_answer = write_lines(tmp_path / "none.jsonl", [json.dumps({k: v for k, v in e.items() if k != "answer"}) for e in events])

    runs = [await ctxprec("score", str(path)) for path in (aliased, canonical, no_answer)]

    assert [run.rc for run in runs] == [0, 0, 0], [run.stderr for run in runs]
    by_alias, by_output, by_query = (read_records(run.stdout) for run in runs)
    assert [r["reference_kind"] for r in by_alias] == ["output", "output"]
    assert [(r["score"], r["verdicts"]) for r in by_alias] == [(r["score"], r["verdicts"]) for r in by_output]
    assert [r["reference_kind"] for r in by_query] == ["query", "query"]
    assert [r["score"] for r in by_alias] != [r["score"] for r in by_query]


def _renamed(event: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    return {(new if k == old else k): v for k, v in event.items()}


# --- Ragas and DeepEval files, JSONL and CSV ---------------------------------------------------------


RAGAS_ROWS = [
    # user_input, retrieved_contexts, response, reference
    (QUESTION, CONTEXTS, ANSWER, None),
    ("How do I reset my password?", ["[relevant] Settings, then Security.", "[irrelevant] Office hours."],
     "Open Settings.", "Use Settings > Security."),
]


async def test_ragas_jsonl_is_read_with_its_own_column_names(stub_judge: StubJudge, tmp_path: Path) -> None:
    lines = []
    for user_input, contexts, response, reference in RAGAS_ROWS:
        row: dict[str, Any] = {"user_input": user_input, "retrieved_contexts": contexts, "response": response}
        if reference is not None:
            row["reference"] = reference
        lines.append(json.dumps(row))
    source = write_lines(tmp_path / "ragas.jsonl", lines)

    done = await ctxprec("score", str(source), "--concurrency", "1", *judge_args(stub_judge))

    assert done.rc == 0, done.stderr
    first, second = read_records(done.stdout)
    assert first["reference_kind"] == "output" and first["answer_source"] == "event"
    assert [v["relevant"] for v in first["verdicts"]] == AGAINST_ANSWER
    # A reference answer is judged against before the generated one.
    assert second["reference_kind"] == "expected_output" and second["score"] == expected_map([True, False])
    payloads = judge_payloads(stub_judge)
    assert [(p["query"], p["reference"]) for p in payloads] == [(QUESTION, ANSWER), (RAGAS_ROWS[1][0], RAGAS_ROWS[1][3])]
    assert warning_lines(done.stderr) == []


async def test_ragas_csv_is_read_with_its_own_column_names(stub_judge: StubJudge, tmp_path: Path) -> None:
    rows = [
        [user_input, json.dumps(contexts), response, reference or ""]
        for user_input, contexts, response, reference in RAGAS_ROWS
    ]
    source = write_csv(tmp_path / "ragas.csv", ["user_input", "retrieved_contexts", "response", "reference"], rows)

    done = await ctxprec("score", str(source), "--concurrency", "1", *judge_args(stub_judge))

    assert done.rc == 0, done.stderr
    first, second = read_records(done.stdout)
    assert tuple(first) == RECORD_FIELDS
    assert first["reference_kind"] == "output" and [v["relevant"] for v in first["verdicts"]] == AGAINST_ANSWER
    assert first["k"] == len(CONTEXTS)
    assert second["reference_kind"] == "expected_output"
    for column, field in (("user_input", "query"), ("retrieved_contexts", "contexts"), ("response", "output"),
                          ("reference", "expected_output")):
        assert f"reading column '{column}' as '{field}'" in done.stderr
    assert warning_lines(done.stderr) == []


async def test_deepeval_csv_with_lists_as_pandas_writes_them(stub_judge: StubJudge, tmp_path: Path) -> None:
    """pandas' to_csv writes a list cell as Python shows it (['a', "b's"]) and adds an unnamed index column."""
    contexts = ["Returns are accepted within thirty days, it's the policy.", "Refund window rules\non the policy page."]
    source = write_csv(
        tmp_path / "deepeval.csv",
        ["", "input", "retrieval_context", "actual_output", "expected_output"],
        [["0", QUESTION, repr(contexts), ANSWER, ""]],
    )

    done = await ctxprec("score", str(source), *judge_args(stub_judge))

    assert done.rc == 0, done.stderr
    (record,) = read_records(done.stdout)
    assert record["reference_kind"] == "output"
    (payload,) = judge_payloads(stub_judge)
    assert [item["text"] for item in payload["contexts"]] == contexts
    assert "column 1 has no name" in done.stderr


@pytest.mark.parametrize("name", ["events.txt", "events"])
async def test_csv_without_its_extension_is_told_by_content(stub_judge: StubJudge, tmp_path: Path, name: str) -> None:
    source = write_csv(tmp_path / name, ["question", "contexts", "answer"], [[QUESTION, json.dumps(CONTEXTS), ANSWER]])
    done = await ctxprec("score", str(source), *judge_args(stub_judge))
    assert done.rc == 0, done.stderr
    (record,) = read_records(done.stdout)
    assert record["reference_kind"] == "output" and [v["relevant"] for v in record["verdicts"]] == AGAINST_ANSWER

    jsonl = write_lines(tmp_path / f"j-{name}", [json.dumps({"question": QUESTION, "contexts": CONTEXTS})])
    done = await ctxprec("score", str(jsonl), *judge_args(stub_judge))
    assert done.rc == 0, done.stderr
    (record,) = read_records(done.stdout)
    assert record["reference_kind"] == "query" and [v["relevant"] for v in record["verdicts"]] == AGAINST_QUESTION


# --- warnings, once per name; --strict ----------------------------------------------------------------


async def test_canonical_name_wins_over_an_alias_with_one_warning(stub_judge: StubJudge, tmp_path: Path) -> None:
    # Different questions, so that the verdict cache does not answer for the judge.
    lines = [
        json.dumps({"query": f"{QUESTION} ({i})", "contexts": CONTEXTS, "output": ANSWER, "answer": f"stale answer {i}"})
        for i in range(3)
    ]
    source = write_lines(tmp_path / "both.jsonl", lines)

    done = await ctxprec("score", str(source), "--concurrency", "1", *judge_args(stub_judge))

    assert done.rc == 0, done.stderr
    records = read_records(done.stdout)
    assert len(records) == 3 and all(r["reference_kind"] == "output" for r in records)
    assert [p["reference"] for p in judge_payloads(stub_judge)] == [ANSWER] * 3
    assert warning_lines(done.stderr) == [
        "ctxprec score: warning: line 1: both 'output' and its alias 'answer' are given; using 'output' "
        "(said once; --strict makes it an error)"
    ]


async def test_unknown_keys_are_warned_once_per_name(stub_judge: StubJudge, tmp_path: Path) -> None:
    lines = [
        json.dumps({"query": QUESTION, "contexts": CONTEXTS, "rubrics": {"x": 1}}),
        json.dumps({"query": QUESTION, "contexts": CONTEXTS, "rubrics": {}, "reference_contexts": ["a"]}),
        json.dumps({"query": QUESTION, "contexts": CONTEXTS, "reference_contexts": ["b"], "rubrics": None}),
        json.dumps({"query": QUESTION, "contexts": CONTEXTS}),
    ]
    source = write_lines(tmp_path / "extra.jsonl", lines)

    done = await ctxprec("score", str(source), *judge_args(stub_judge))

    assert done.rc == 0, done.stderr
    assert len(read_records(done.stdout)) == 4
    warnings = warning_lines(done.stderr)
    assert len(warnings) == 2
    assert "line 1: unknown key 'rubrics' ignored" in warnings[0]
    assert "line 2: unknown key 'reference_contexts' ignored" in warnings[1]
    assert "4 events, 4 scored, 0 failed" in done.stderr


async def test_unknown_csv_column_is_warned_once(stub_judge: StubJudge, tmp_path: Path) -> None:
    rows = [[QUESTION, json.dumps(CONTEXTS), ANSWER, f"note {i}"] for i in range(5)]
    source = write_csv(tmp_path / "notes.csv", ["query", "contexts", "output", "notes"], rows)
    done = await ctxprec("score", str(source), *judge_args(stub_judge))
    assert done.rc == 0, done.stderr
    assert len(read_records(done.stdout)) == 5
    assert warning_lines(done.stderr) == [
        "ctxprec score: warning: line 2: unknown column 'notes' ignored (said once per name; --strict makes it an error)"
    ]


async def test_strict_makes_unknown_keys_and_conflicts_errors_for_their_lines(stub_judge: StubJudge, tmp_path: Path) -> None:
    lines = [
        json.dumps({"user_input": QUESTION, "retrieved_contexts": CONTEXTS, "response": ANSWER}),  # aliases are fine
        json.dumps({"query": QUESTION, "contexts": CONTEXTS, "trace_id": "ab" * 16, "rubrics": {}}),
        json.dumps({"query": QUESTION, "question": "other", "contexts": CONTEXTS}),
        json.dumps({"query": QUESTION, "contexts": CONTEXTS}),
    ]
    source = write_lines(tmp_path / "strict.jsonl", lines)

    done = await ctxprec("score", str(source), "--strict", *judge_args(stub_judge))

    assert done.rc == 1, done.stderr
    records = read_records(done.stdout)
    assert len(records) == 4
    assert [r["error"]["type"] if r["error"] else None for r in records] == [None, "bad_input", "bad_input", None]
    assert records[1]["error"]["message"] == "line 2: unknown key 'rubrics' (strict mode)"
    assert records[1]["trace_id"] == "ab" * 16  # the error record can still be joined to its trace
    assert records[2]["error"]["message"] == "line 3: both 'query' and its alias 'question' are given (strict mode)"
    assert records[0]["reference_kind"] == "output" and records[3]["score"] is not None
    assert "4 events, 2 scored, 2 failed (bad_input: 2)" in done.stderr
    assert warning_lines(done.stderr) == []  # the error records say it; no warning as well
    assert stub_judge.stats.requests == 2


async def test_strict_applies_to_csv_columns(stub_judge: StubJudge, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "s.csv", ["query", "contexts", "notes"], [[QUESTION, json.dumps(CONTEXTS), ""]])
    done = await ctxprec("score", str(source), "--strict", *judge_args(stub_judge))
    assert done.rc == 1
    (record,) = read_records(done.stdout)
    assert record["error"]["message"] == "line 2: unknown column 'notes' (strict mode)"


# --- bad CSV: clear errors, good rows kept ------------------------------------------------------------


async def test_bad_csv_rows_are_error_records_and_the_rest_are_scored(stub_judge: StubJudge, tmp_path: Path) -> None:
    good = [QUESTION, json.dumps(CONTEXTS), ANSWER]
    text = "\n".join([
        "question,contexts,answer",  # 1
        ",".join(_csv_cells(good)),  # 2
        f'{QUESTION},just one context,{ANSWER}',  # 3: not a JSON array
        f'{QUESTION},"[""unclosed",{ANSWER}',  # 4: not valid JSON
        f"{QUESTION},{_csv_cells(good)[1]}",  # 5: a cell short
        "",  # 6: blank
        ",".join(_csv_cells([QUESTION, json.dumps(["multi\nline context", CONTEXTS[1]]), ANSWER])),  # 7-8
        ",".join(_csv_cells(good)),  # 9
    ]) + "\n"
    source = tmp_path / "bad.csv"
    source.write_text(text, encoding="utf-8")

    done = await ctxprec("score", str(source), *judge_args(stub_judge))

    assert done.rc == 1
    records = read_records(done.stdout)
    assert len(records) == 6
    errors = [r["error"]["message"] if r["error"] else None for r in records]
    assert errors[0] is None and errors[4] is None and errors[5] is None
    assert errors[1].startswith("line 3: column 'contexts': expected a JSON array")
    assert errors[2].startswith("line 4: column 'contexts': not a JSON array")
    assert errors[3] == "line 5: the row has 2 cells but the header names 3 columns"
    assert records[4]["k"] == 2  # the quoted newline stayed inside its cell
    assert "Traceback" not in done.stderr
    assert "6 events, 3 scored, 3 failed (bad_input: 3)" in done.stderr


def _csv_cells(cells: list[str]) -> list[str]:
    return ['"' + c.replace('"', '""') + '"' for c in cells]


async def test_invalid_utf8_in_a_csv_row_fails_that_row_only(stub_judge: StubJudge, tmp_path: Path) -> None:
    good = ",".join(_csv_cells([QUESTION, json.dumps(CONTEXTS)])).encode()
    source = tmp_path / "latin1.csv"
    source.write_bytes(b"query,contexts\n" + good + b"\n" + b'"caf\xe9",' + good.split(b",", 1)[1] + b"\n" + good + b"\n")
    done = await ctxprec("score", str(source), *judge_args(stub_judge))
    assert done.rc == 1
    records = read_records(done.stdout)
    assert [r["error"]["message"] if r["error"] else None for r in records] == [
        None, "line 3: not valid UTF-8 (line 3, byte 4)", None
    ]


async def test_a_csv_header_that_names_a_column_twice_is_a_usage_error(tmp_path: Path) -> None:
    source = write_csv(tmp_path / "dup.csv", ["query", "contexts", "query"], [["a", "[]", "b"]])
    done = await ctxprec("score", str(source))
    assert done.rc == 2
    assert "dup.csv: the header names column 'query' twice (columns 1 and 3)" in done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr


async def test_a_csv_header_without_query_or_contexts_is_said_at_once(tmp_path: Path) -> None:
    source = write_csv(tmp_path / "wrong.csv", ["prompt", "docs"], [["a", "[]"]])
    done = await ctxprec("score", str(source))
    assert done.rc == 1
    assert "warning: the header has no column for 'query' and 'contexts' (columns: 'prompt' and 'docs')" in done.stderr
    (record,) = read_records(done.stdout)
    assert record["error"]["message"].startswith("line 2: missing required field 'query'")


# --- the event's time in the record ----------------------------------------------------------------


async def test_records_carry_the_events_timestamp(stub_judge: StubJudge, tmp_path: Path) -> None:
    lines = [
        json.dumps({"query": QUESTION, "contexts": CONTEXTS, "timestamp": "2026-11-20T08:00:00+01:00"}),
        json.dumps({"query": QUESTION, "contexts": CONTEXTS, "timestamp": 1764000000}),
        json.dumps({"query": QUESTION, "contexts": CONTEXTS}),
        json.dumps({"query": QUESTION, "contexts": [], "timestamp": "2026-11-21T00:00:00Z"}),
    ]
    source = write_lines(tmp_path / "timed.jsonl", lines)
    done = await ctxprec("score", str(source), *judge_args(stub_judge))
    records = read_records(done.stdout)
    assert records[0]["timestamp"] == "2026-11-20T08:00:00+01:00"  # RFC 3339 kept as given
    assert parse_rfc3339(records[1]["timestamp"]) == 1764000000  # epoch seconds become RFC 3339
    assert records[2]["timestamp"] is None
    assert records[3]["decision"] == "no_contexts" and records[3]["timestamp"] == "2026-11-21T00:00:00Z"
    assert all(tuple(r) == RECORD_FIELDS for r in records)

    csv_source = write_csv(tmp_path / "timed.csv", ["query", "contexts", "timestamp"],
                           [[QUESTION, json.dumps(CONTEXTS), "1764000000"], [QUESTION, json.dumps(CONTEXTS), "2026-11-20T08:00:00Z"]])
    done = await ctxprec("score", str(csv_source), *judge_args(stub_judge))
    first, second = read_records(done.stdout)
    assert parse_rfc3339(first["timestamp"]) == 1764000000 and second["timestamp"] == "2026-11-20T08:00:00Z"


async def test_a_warning_clears_the_progress_line_first(stub_judge: StubJudge, tmp_path: Path) -> None:
    import io

    from ctxprec.scorer.batch import BatchOptions, run_batch

    lines = [json.dumps({"query": f"{QUESTION} {i}", "contexts": CONTEXTS, **({"extra": 1} if i == 5 else {})})
             for i in range(8)]
    source = write_lines(tmp_path / "events.jsonl", lines)
    stderr = io.StringIO()
    options = BatchOptions(events_path=str(source), output_path=str(tmp_path / "out.jsonl"), model="openai/stub",
                           api_base=stub_judge.url, concurrency=1, progress=True)
    assert await run_batch(options, stderr=stderr) == 0
    text = stderr.getvalue()
    warning = "ctxprec score: warning: line 6: unknown key 'extra' ignored"
    assert text.count(warning) == 1
    # Whatever the bar had drawn is wiped, so the warning starts a clean line of its own.
    assert "\r\x1b[K" + warning in text
    assert "8/8" in text
