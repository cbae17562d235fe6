"""What the command line tells an operator, through the real `ctxprec` entry point: settings
checked at start (a judge URL without http(s)://, a CTXPREC_* variable no command reads, a flag
given by a prefix or misspelt: one line each, with a did-you-mean), and `ctxprec score`'s errors
where people look (the first failures on stderr with line and reason, unknown keys on failing rows,
an empty or binary input refused in words); score records that can be found again (query, line,
event id, a document's first words), redacted like every other text written out."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxprec.collector.cli import main

ENTRY = [sys.executable, "-m", "ctxprec.collector.cli"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def event(i: int, **extra: object) -> str:
    return json.dumps({"query": f"How do I reset my password? (case {i})", "output": "Open Settings > Security.",
                       "contexts": ["Open Settings > Security to reset a password.", "Office hours are 9-5."],
                       **extra})


# -- settings checked at start ----------------------------------------------------------------------

def test_a_misspelt_serve_flag_is_one_line_with_a_did_you_mean() -> None:
    done = subprocess.run([*ENTRY, "serve", "--sample-rat", "0.5"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == ("ctxprec serve: error: unknown flag --sample-rat; did you mean --sample-rate? "
                           "(see 'ctxprec serve --help')\n")
    assert done.stdout == ""


@pytest.mark.parametrize("argv,flag", [
    (["score", "events.jsonl", "--concurr", "3"], "--concurr"),  # a prefix of --concurrency: not taken
    (["report", "scores.jsonl", "-o", "r.html", "--out", "x.html"], "--out"),  # a prefix of --output
    (["demo", "--durat", "1"], "--durat"),
    (["stub-judge", "--por", "1"], "--por"),
])
def test_no_flag_is_taken_by_a_prefix(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith(f"ctxprec {argv[0]}: error: unknown flag {flag}; did you mean --") and err.count("\n") == 1


def test_an_unknown_command_gets_a_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "scroe", "x")
    assert code == 2 and "unknown command 'scroe'; did you mean score?" in err


@pytest.mark.parametrize("command", ["serve", "score"])
@pytest.mark.parametrize("base", ["127.0.0.1:1/v1", "ftp://127.0.0.1/v1", "http://"])
def test_a_judge_url_without_http_is_refused_at_start_naming_the_flag(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, base: str) -> None:
    events = tmp_path / "e.jsonl"
    events.write_text(event(1) + "\n")
    argv = ["--judge-model", "openai/x", "--judge-api-base", base]
    code, _, err = run(capsys, command, *([str(events)] if command == "score" else []), *argv)
    assert code == 2
    assert "--judge-api-base" in err and "must be an http:// or https:// URL" in err and err.count("\n") == 1
    assert not (tmp_path / "scores.jsonl").exists()


def test_an_unknown_variable_is_warned_about_with_a_did_you_mean(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    events = tmp_path / "e.jsonl"
    events.write_text(event(1) + "\n")
    monkeypatch.setenv("CTXPREC_SAMPEL_RATE", "0.5")
    # Read by other commands or by the sidecar without a flag: known, never warned about.
    monkeypatch.setenv("CTXPREC_SAMPLE_RATE", "0.5")
    monkeypatch.setenv("CTXPREC_METRICS_TOKEN", "secret")
    monkeypatch.setenv("CTXPREC_CONFIG", "")
    code, _, err = run(capsys, "score", str(events), "-o", str(tmp_path / "out.jsonl"))
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "is set but" in line]
    assert warnings == ["ctxprec score: warning: CTXPREC_SAMPEL_RATE is set but no ctxprec command reads it "
                        "(ignored); did you mean CTXPREC_SAMPLE_RATE?"]


def test_serve_warns_about_an_unknown_variable_before_refusing_a_bad_one(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXPREC_JUDGE_MODLE", "openai/x")
    monkeypatch.setenv("CTXPREC_SAMPLE_RATE", "2")
    code, _, err = run(capsys, "serve")
    assert code == 2
    assert "CTXPREC_JUDGE_MODLE is set but no ctxprec command reads it (ignored); did you mean " \
           "CTXPREC_JUDGE_MODEL?" in err
    assert "config key sampling.default_rate (from env CTXPREC_SAMPLE_RATE)" in err


# -- ctxprec score: errors where people look --------------------------------------------------------

def test_the_first_failures_are_on_stderr_with_their_line_and_reason(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    lines = [event(1).encode(), b'{"query": "bad \xff byte", "contexts": ["x"]}',
             json.dumps({"query": "q", "contexts": "one string"}).encode(),
             json.dumps({"query": "Where is the office?", "contexs": ["In Paris."]}).encode()]
    lines += [json.dumps({"query": f"q{i}", "contexts": [i]}).encode() for i in range(5)]
    source = tmp_path / "events.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "scores.jsonl"
    code, _, err = run(capsys, "score", str(source), "-o", str(out))
    assert code == 1
    said = [line for line in err.splitlines() if line.startswith("ctxprec score: line ")]
    assert said == [
        "ctxprec score: line 2 failed (bad_input): not valid UTF-8 (byte 15)",
        "ctxprec score: line 3 failed (bad_input): 'contexts' must be a list of strings or objects with 'content', "
        "got a string",
        "ctxprec score: line 4 failed (bad_input): missing required field 'contexts' (or an alias: "
        "'retrieved_contexts' or 'retrieval_context')",
        "ctxprec score: line 5 failed (bad_input): 'contexts' must be a list of strings or objects with 'content'; "
        "item 0 is a number",
        "ctxprec score: line 6 failed (bad_input): 'contexts' must be a list of strings or objects with 'content'; "
        "item 0 is a number",
    ]
    assert f"ctxprec score: 3 more failed; their records in {out} say why" in err
    # The misspelt key of the failing row is named, with the key it most likely meant.
    assert "line 4: unknown key 'contexs' ignored; did you mean 'contexts'?" in err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["line"] for r in records] == list(range(1, 10))
    assert records[3]["query"] == "Where is the office?"  # a failed event's question, when it could be read


@pytest.mark.parametrize("name,content,words", [
    ("empty.jsonl", b"", "holds no events (it is empty or blank); nothing to score"),
    ("blank.jsonl", b"\n  \n\n", "holds no events (it is empty or blank); nothing to score"),
    ("header.csv", b"question,contexts\n", "holds a header row and no rows; nothing to score"),
    ("events", b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00xl/workbook.xml\x00\x00",
     "neither CSV nor JSON Lines: it holds binary data"),
    ("events.csv", bytes(range(256)) * 8, "neither CSV nor JSON Lines: it holds binary data"),
])
def test_an_input_without_events_is_refused_naming_the_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, content: bytes, words: str) -> None:
    source = tmp_path / name
    source.write_bytes(content)
    out = tmp_path / "scores.jsonl"
    code, _, err = run(capsys, "score", str(source), "-o", str(out))
    assert code == 2
    assert err.startswith(f"ctxprec score: error: {source}: {words}")
    assert err.count("\n") == 1 and "Error" not in err and "NUL" not in err
    assert not out.exists()  # refused before the output was opened


# -- records that can be found again ------------------------------------------------------------------

def test_records_carry_the_question_line_id_and_first_words_redacted_and_cut(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    question = ("I am jane.doe@example.com and my card 4111 1111 1111 1111 was charged twice; " + "why " * 60).strip()
    contexts = ["Refunds for double charges reach jane.doe@example.com within 5 business days of the request.",
                {"content": "Office hours are 9-5.", "id": "hours"}]
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join([
        json.dumps({"id": 1042, "query": question, "contexts": contexts, "output": "Refunds take 5 business days."}),
        json.dumps({"id": "q-7", "trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331",
                    "query": "Short?", "contexts": ["Yes."]}),
    ]) + "\n")
    out = tmp_path / "scores.jsonl"
    code, _, err = run(capsys, "score", str(source), "-o", str(out), "--redact-pii", "--record-text-chars", "60")
    assert code == 0, err
    first, second = (json.loads(line) for line in out.read_text().splitlines())
    assert first["line"] == 1 and first["event_id"] == "1042"
    assert first["query"].startswith("I am [EMAIL] and my card [CARD] was charged") and first["query"].endswith("\u2026")
    assert len(first["query"]) <= 60 and "@" not in json.dumps(first) and "4111" not in json.dumps(first)
    hashed, named = first["verdicts"]
    assert hashed["document"].startswith("sha256:") and hashed["preview"].startswith("Refunds for double charges")
    assert "[EMAIL]" in hashed["preview"] or hashed["preview"].endswith("\u2026")
    assert named["document"] == "hours" and "preview" not in named
    assert second["line"] == 2 and second["event_id"] == "q-7" and second["query"] == "Short?"
    assert second["trace_id"] == "0af7651916cd43dd8448eb211c80319c"

    # 0 keeps no text in records; the idempotency id does not depend on what text is kept.
    bare = tmp_path / "bare.jsonl"
    code, _, err = run(capsys, "score", str(source), "-o", str(bare), "--redact-pii", "--record-text-chars", "0")
    assert code == 0, err
    first_bare = json.loads(bare.read_text().splitlines()[0])
    assert first_bare["query"] is None and all("preview" not in v for v in first_bare["verdicts"])
    assert first_bare["id"] == first["id"]
