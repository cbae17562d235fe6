"""One set of judge flags: `ctxprec score` and `ctxprec serve` take the same --judge-* flags from
the one declaration (scorer/config.py), refuse a bad value in the same words, and a budget over a
judge with no price refuses to start."""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctxprec.collector import config as serve_config
from ctxprec.collector.cli import main
from ctxprec.scorer.config import judge_settings, setting_flag


def _flags(command: str) -> set[str]:
    done = subprocess.run([sys.executable, "-m", "ctxprec.collector.cli", command, "--help"], capture_output=True,
                          text=True, timeout=60)
    return set(re.findall(r"(--judge-[a-z-]+|--redact-pii|--record-text-chars)", done.stdout))


def test_score_and_serve_take_the_same_judge_flags() -> None:
    declared = {setting_flag(s) for s in judge_settings() if setting_flag(s)}
    assert {"--judge-api-key", "--judge-timeout", "--judge-concurrency", "--judge-max-tokens",
            "--judge-structured-output", "--judge-price-per-mtok"} <= declared
    assert declared <= _flags("score")
    assert declared <= _flags("serve")


@pytest.mark.parametrize("flag,value,words", [
    ("--judge-timeout", "-1", "must be a number > 0, got '-1'"),
    ("--judge-structured-output", "xml", "must be one of auto, json_schema, json_object_schema, json_object, off"),
    ("--judge-price-per-mtok", "3", "must be INPUT,OUTPUT"),
])
def test_a_bad_value_is_refused_in_the_same_words(tmp_path: Path, capsys, flag: str, value: str, words: str) -> None:
    events = tmp_path / "e.jsonl"
    events.write_text('{"query": "q", "contexts": ["c"]}\n')
    assert main(["score", str(events), flag, value]) == 2
    assert words in capsys.readouterr().err
    with pytest.raises(serve_config.ConfigError, match=re.escape(words)):
        serve_config.load(None, environ={serve_config.env_name(flag): value})


async def test_score_takes_the_flags_the_readme_gives_serve(stub_judge, tmp_path: Path) -> None:
    events, out = tmp_path / "e.jsonl", tmp_path / "s.jsonl"
    events.write_text(json.dumps({"query": "How do plants make sugar?", "output": "Photosynthesis makes sugar.",
                                  "contexts": ["Photosynthesis turns sunlight into sugar.", "Paris is in France."]}))
    # In another process, while this test's event loop serves the stub judge.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ctxprec.collector.cli", "score", str(events), "-o", str(out),
        "--judge-model", "openai/stub", "--judge-api-base", stub_judge.url, "--judge-api-key", "unused",
        "--judge-timeout", "5", "--judge-concurrency", "2", "--judge-max-tokens", "512",
        "--judge-structured-output", "json_object", stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, stderr.decode()
    record = json.loads(out.read_text())
    assert [v["relevant"] for v in record["verdicts"]] == [True, False]
    body = stub_judge.recent[-1].body
    assert body["response_format"] == {"type": "json_object"} and body["max_tokens"] <= 512
    assert stub_judge.recent[-1].authorization == "Bearer unused"


def test_a_budget_over_an_unpriced_judge_refuses_to_start() -> None:
    with pytest.raises(serve_config.ConfigError) as caught:
        serve_config.load(None, environ={"CTXPREC_JUDGE_MODEL": "openai/my-finetune",
                                         "CTXPREC_DAILY_BUDGET_USD": "5"})
    assert "'openai/my-finetune'" in str(caught.value) and "--judge-price-per-mtok" in str(caught.value)
    priced = serve_config.load(None, environ={"CTXPREC_JUDGE_MODEL": "openai/my-finetune",
                                              "CTXPREC_DAILY_BUDGET_USD": "5",
                                              "CTXPREC_JUDGE_PRICE_PER_MTOK": "0.2,0.8"})
    assert priced.judge.judge_config().price_per_mtok == (0.2, 0.8)
    assert serve_config.load(None, environ={"CTXPREC_JUDGE_MODEL": "openai/gpt-4o-mini",
                                            "CTXPREC_DAILY_BUDGET_USD": "5"}).sampling.daily_budget_usd == 5
