"""`ctxprec score` end to end: the installed console script, in its own process, against the stub
judge over real HTTP (`--judge-model openai/stub --judge-api-base <stub url>`)."""
from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from ctxprec.collector.cli import CommandParser, EnvError, Subcommand, _load
from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.batch import BatchOptions, run_batch, score_lines
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import build_engine
from ctxprec.scorer.documents import text_hash
from ctxprec.scorer.records import RECORD_FIELDS

CTXPREC = Path(sys.executable).with_name("ctxprec")


@dataclass
class Completed:
    rc: int
    stdout: str
    stderr: str


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPREC_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env.update(extra)
    return env


async def ctxprec(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> Completed:
    """Run the console script without blocking the loop that serves the in-process stub judge."""
    proc = await asyncio.create_subprocess_exec(
        str(CTXPREC),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=env or clean_env(),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return Completed(proc.returncode or 0, out.decode(), err.decode())


def judge_args(stub: StubJudge) -> list[str]:
    return ["--judge-model", "openai/stub", "--judge-api-base", stub.url]


def expected_map(pattern: list[bool], scale: int = 1) -> float:
    """MAP x scale, rounded half up to two decimals (docs/FORMATS.md, the record's `score`), computed independently."""
    total, so_far = Fraction(0), 0
    for i, relevant in enumerate(pattern):
        if relevant:
            so_far += 1
            total += Fraction(so_far, i + 1)
    exact = total / so_far * scale if so_far else Fraction(0)
    as_decimal = Decimal(exact.numerator) / Decimal(exact.denominator)
    return float(as_decimal.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def pattern_for(i: int) -> list[bool]:
    k = 1 + i % 5
    return [bool((i >> bit) & 1) for bit in range(k)]


def event(i: int) -> dict[str, Any]:
    pattern = pattern_for(i)
    return {
        "trace_id": f"{i:032x}",
        "span_id": f"{i + 1:016x}",
        "service": "svc-a" if i % 2 else "svc-b",
        "query": f"question number {i}",
        "contexts": [f"passage {j} {'[relevant]' if rel else '[irrelevant]'}" for j, rel in enumerate(pattern)],
        "attributes": {"retriever": "kb-v2"},
    }


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read_records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_good_lines_are_scored_in_input_order(stub_judge: StubJudge, tmp_path: Path) -> None:
    # Jitter makes answers come back out of order; the file must still be in input order.
    stub_judge.configure(latency_ms=5, jitter_ms=40, seed=3)
    events = [event(i) for i in range(40)]
    source = write_lines(tmp_path / "events.jsonl", [json.dumps(e) for e in events])
    out = tmp_path / "scores.jsonl"

    done = await ctxprec("score", str(source), "-o", str(out), "--concurrency", "8", *judge_args(stub_judge))

    assert done.rc == 0, done.stderr
    assert done.stdout == ""  # records went to the file
    records = read_records(out.read_text())
    assert [r["trace_id"] for r in records] == [e["trace_id"] for e in events]
    for i, record in enumerate(records):
        assert tuple(record) == RECORD_FIELDS
        assert record["error"] is None and record["decision"] == "evaluated"
        assert record["score"] == expected_map(pattern_for(i))
        assert [v["relevant"] for v in record["verdicts"]] == pattern_for(i)
        # Contexts without ids are named by their text's hash (scorer.documents).
        assert [v["document"] for v in record["verdicts"]] == [text_hash(c) for c in events[i]["contexts"]]
        assert record["service"] == events[i]["service"] and record["retriever"] == "kb-v2"
        assert record["judge"]["model"] == "openai/stub" and record["judge"]["calls"] == 1
    assert len({r["id"] for r in records}) == 40
    assert stub_judge.stats.requests == 40
    # The summary: count, mean, failures, tokens; and no progress bar when stderr is not a TTY.
    mean = sum(r["score"] for r in records) / 40
    assert "40 events, 40 scored, 0 failed" in done.stderr
    assert f"mean score {mean:.3f}" in done.stderr
    assert "40 requests (0 failed)" in done.stderr
    assert f"{stub_judge.stats.prompt_tokens} prompt tokens" in done.stderr
    assert f"{stub_judge.stats.completion_tokens} completion tokens" in done.stderr
    assert "\r" not in done.stderr


async def test_bad_lines_give_error_records_and_the_rest_are_scored(stub_judge: StubJudge, tmp_path: Path) -> None:
    lines = [
        json.dumps(event(1)),  # 1
        "{this is not json",  # 2
        json.dumps({"contexts": ["a"]}),  # 3
        "",  # 4: blank lines are skipped, not errors
        json.dumps({"query": "q", "contexts": "just a string"}),  # 5
        json.dumps({"query": "q", "contexts": [{"text": "no content key"}]}),  # 6
        json.dumps({**event(6), "query": 42}),  # 7
        json.dumps(event(2)),  # 8
        json.dumps({"query": "q", "contexts": []}),  # 9
    ]
    source = write_lines(tmp_path / "events.jsonl", lines)

    done = await ctxprec("score", str(source), *judge_args(stub_judge))

    assert done.rc == 1
    records = read_records(done.stdout)
    assert len(records) == 8
    errors = [(r["error"] or {}).get("type") for r in records]
    assert errors == [None, "bad_input", "bad_input", "bad_input", "bad_input", "bad_input", None, "no_contexts"]
    messages = [r["error"]["message"] for r in records if r["error"]]
    assert messages[0].startswith("line 2: not valid JSON")
    assert messages[1].startswith("line 3: missing required field 'query'")
    assert messages[2].startswith("line 5: 'contexts' must be a list of strings or objects with 'content'")
    assert messages[3].startswith("line 6: 'contexts' must be a list") and "item 0 has no 'content'" in messages[3]
    assert messages[4] == "line 7: 'query' must be a string, got a number"
    assert messages[5] == "line 9: No context available for evaluation"
    # The bad event on line 7 still carries the ids it had, so it can be joined to its trace.
    assert records[5]["trace_id"] == event(6)["trace_id"]
    for record in records:
        assert tuple(record) == RECORD_FIELDS
        if record["error"]:
            assert record["score"] is None
    assert records[0]["score"] == expected_map(pattern_for(1))
    assert records[6]["trace_id"] == event(2)["trace_id"] and records[6]["score"] is not None
    assert "8 events, 2 scored, 6 failed (bad_input: 5, no_contexts: 1)" in done.stderr
    assert "Traceback" not in done.stderr
    assert stub_judge.stats.requests == 2


async def test_judge_failures_become_error_records(make_stub_judge: Any, tmp_path: Path) -> None:
    # Every answer is unusable JSON: the judge client gives up and the sample fails, not the batch.
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("malformed",))
    source = write_lines(tmp_path / "events.jsonl", [json.dumps(event(3)), json.dumps(event(4))])

    done = await ctxprec("score", str(source), *judge_args(stub))

    assert done.rc == 1, done.stderr
    records = read_records(done.stdout)
    assert len(records) == 2
    for line_no, record in enumerate(records, start=1):
        assert record["score"] is None and record["decision"] == "failed"
        assert record["error"]["type"] not in ("bad_input", "internal_error")
        assert record["error"]["message"].startswith(f"line {line_no}: ")
    assert "2 failed" in done.stderr and "Traceback" not in done.stderr
    # The judge was asked (and re-asked); the summary pays for those requests although no sample scored.
    assert stub.stats.requests >= 2
    assert f"{stub.stats.requests} requests" in done.stderr
    assert f"{stub.stats.prompt_tokens} prompt tokens" in done.stderr


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["score", "{tmp}/missing.jsonl"], {}, "missing.jsonl: no such file"),
        (["score", "{events}", "--scale", "-1"], {}, "--scale: must be a number >= 0"),
        (["score", "{events}", "--concurrency", "zero"], {}, "--concurrency: must be an integer"),
        (["score", "{events}", "-o", "{tmp}/no/such/dir/out.jsonl"], {}, "does not exist"),
        (["score", "{events}"], {"CTXPREC_SCALE": "big"}, "CTXPREC_SCALE='big': invalid value for --scale"),
        (["score", "{events}", "--judge-model", "openai/gpt-4o-mini"], {"OPENAI_API_KEY": ""}, "api_key"),
        (["score", "{events}", "-o", "{events}"], {}, "is the input file"),
        (["score", "{events}", "--judge-api-base", "http://127.0.0.1:9/v1"], {}, "--judge-api-base needs --judge-model"),
        (["score"], {}, "the following arguments are required: EVENTS"),
        (["frobnicate"], {}, "unknown command 'frobnicate'"),
        ([], {}, "a command is required"),
    ],
)
async def test_usage_errors_exit_2_with_one_line(tmp_path: Path, args: list[str], env: dict[str, str], needle: str) -> None:
    events = write_lines(tmp_path / "events.jsonl", [json.dumps(event(1))])
    argv = [a.format(tmp=tmp_path, events=events) for a in args]
    environ = clean_env(**env)
    if env.get("OPENAI_API_KEY") == "":
        environ.pop("OPENAI_API_KEY")

    done = await ctxprec(*argv, env=environ)

    assert done.rc == 2, done.stderr
    assert needle in done.stderr
    assert "Traceback" not in done.stderr
    error_lines = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(error_lines) == 1
    assert done.stdout == ""


async def test_local_judge_is_the_default_and_says_how_to_use_a_real_one(tmp_path: Path) -> None:
    source = write_lines(
        tmp_path / "events.jsonl",
        [json.dumps({"query": "reset password", "contexts": ["To reset your password open settings", "Office hours"],
                     "output": "Open settings to reset your password"})],
    )
    done = await ctxprec("score", str(source))
    assert done.rc == 0, done.stderr
    assert "using the local judge" in done.stderr and "--judge-model" in done.stderr
    (record,) = read_records(done.stdout)
    assert record["judge"]["model"] == "local"
    assert record["score"] is not None and record["k"] == 2


async def test_env_supplies_flags_and_flags_win(stub_judge: StubJudge, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "events.jsonl", [json.dumps(event(5))])
    env = clean_env(CTXPREC_JUDGE_MODEL="openai/stub", CTXPREC_JUDGE_API_BASE=stub_judge.url, CTXPREC_SCALE="10")
    done = await ctxprec("score", str(source), env=env)
    assert done.rc == 0, done.stderr
    (record,) = read_records(done.stdout)
    assert record["judge"]["model"] == "openai/stub" and record["scale"] == 10
    assert record["score"] == expected_map(pattern_for(5), scale=10)
    assert "using the local judge" not in done.stderr

    done = await ctxprec("score", str(source), "--scale", "2", env=env)
    (record,) = read_records(done.stdout)
    assert record["scale"] == 2
    assert stub_judge.stats.requests == 2


async def test_window_bounds_events_held_and_order_is_kept(make_stub_judge: Any) -> None:
    """Streaming: the reader never runs more than `window` lines ahead of the writer."""
    stub = await make_stub_judge(latency_ms=2, jitter_ms=20, seed=7)
    engine = build_engine(JudgeConfig(model="openai/stub", api_base=stub.url, concurrency=4))
    read = 0
    written: list[str] = []
    max_ahead = 0

    def lines():
        nonlocal read
        for i in range(200):
            read += 1
            yield i + 1, json.dumps(event(i)).encode()

    def write(record: dict[str, Any]) -> bool:
        nonlocal max_ahead
        written.append(record["trace_id"])
        max_ahead = max(max_ahead, read - len(written))
        return True

    try:
        summary = await score_lines(lines(), engine, concurrency=4, window=10, write=write)
    finally:
        await engine.aclose()
    assert written == [event(i)["trace_id"] for i in range(200)]
    assert max_ahead <= 10
    assert summary.scored == 200 and summary.failed == 0


async def test_verdicts_carry_the_events_context_ids_or_text_hashes() -> None:
    engine = build_engine(JudgeConfig(model="local"))
    contexts = [{"content": "Open Settings > Security to reset a password.", "id": "kb-12"},
                "Reset links expire after an hour.", {"content": "Office hours are 9-5.", "id": 7}]
    line = json.dumps({"query": "How do I reset my password?", "contexts": contexts,
                       "output": "Open Settings > Security and reset the password."})
    written: list[dict[str, Any]] = []
    try:
        await score_lines([(1, line.encode())], engine, concurrency=1, window=4,
                          write=lambda record: written.append(record) is None)
    finally:
        await engine.aclose()
    (record,) = written
    assert [v["document"] for v in record["verdicts"]] == ["kb-12", text_hash("Reset links expire after an hour."), "7"]


async def test_progress_bar_when_stderr_is_a_terminal(stub_judge: StubJudge, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "events.jsonl", [json.dumps(event(i)) for i in range(12)])
    stderr = io.StringIO()
    options = BatchOptions(
        events_path=str(source),
        output_path=str(tmp_path / "out.jsonl"),
        model="openai/stub",
        api_base=stub_judge.url,
        concurrency=3,
        progress=True,  # what a TTY on stderr turns on
    )
    assert await run_batch(options, stderr=stderr) == 0
    text = stderr.getvalue()
    assert "\r[" in text and "12/12" in text and "/s ETA" in text
    assert "12 events, 12 scored, 0 failed" in text


def test_help_does_not_import_litellm_or_grpc() -> None:
    code = (
        "import sys\n"
        "from ctxprec.collector.cli import main\n"
        "for argv in (['--help'], ['score', '--help'], ['report', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('litellm', 'grpc', 'opentelemetry'))\n"
        "print('HEAVY', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=clean_env())
    assert "HEAVY []" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


def test_missing_subcommand_module_is_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert _load(Subcommand("later", "ctxprec.collector.not_written_yet", "")) is None
    assert "'later' is not available in this build" in capsys.readouterr().err
    assert _load(Subcommand("broken", "ctxprec.collector.config_types", "")) is None  # no add_arguments/run
    assert "has no add_arguments or run" in capsys.readouterr().err


def test_env_defaults_convert_and_name_the_variable() -> None:
    parser = CommandParser()
    parser.add_argument("--judge-model")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--mode", choices=["span", "evaluator"], default="span")
    used = parser.apply_env_defaults({"CTXPREC_CONCURRENCY": "9", "CTXPREC_DRY_RUN": "yes", "CTXPREC_MODE": "evaluator"})
    assert sorted(used) == ["CTXPREC_CONCURRENCY", "CTXPREC_DRY_RUN", "CTXPREC_MODE"]
    args = parser.parse_args([])
    assert (args.concurrency, args.dry_run, args.mode, args.judge_model) == (9, True, "evaluator", None)
    assert parser.parse_args(["--concurrency", "2"]).concurrency == 2
    with pytest.raises(EnvError, match="CTXPREC_MODE='x': --mode must be one of span, evaluator"):
        parser.apply_env_defaults({"CTXPREC_MODE": "x"})
    with pytest.raises(EnvError, match="CTXPREC_DRY_RUN='maybe': --dry-run is a switch"):
        parser.apply_env_defaults({"CTXPREC_DRY_RUN": "maybe"})


async def test_redact_pii_keeps_personal_data_away_from_the_judge(stub_judge: StubJudge, tmp_path: Path) -> None:
    email, card = "jane.doe@example.com", "4111 1111 1111 1111"
    line = {"query": f"Why was my card {card} declined? Mail me at {email}",
            "contexts": [f"[relevant] Declines for {email} are explained in billing.", "[irrelevant] Shipping times."],
            "output": "Your bank declined it."}
    source = write_lines(tmp_path / "events.jsonl", [json.dumps(line)] * 2)

    done = await ctxprec("score", str(source), "--concurrency", "1", *judge_args(stub_judge))
    plain = [json.dumps(r.body) for r in stub_judge.recent if r.body]
    assert done.rc == 0 and any(email in body for body in plain)  # without the flag the text goes as is

    stub_judge.recent.clear()
    done = await ctxprec("score", str(source), "--redact-pii", "--concurrency", "1", *judge_args(stub_judge))
    assert done.rc == 0, done.stderr
    sent = [json.dumps(r.body) for r in stub_judge.recent if r.body]
    assert sent, "the judge was not called"
    assert not any(email in body or card in body or "4111" in body for body in sent)
    assert all("[EMAIL]" in body and "[CARD]" in body for body in sent)
    # Redaction does not change what is relevant: same verdicts, same score.
    assert [r["score"] for r in read_records(done.stdout)] == [1.0, 1.0]
