"""Prices from litellm's cost map file, read without importing litellm, agree with
litellm.cost_per_token; and a priced model on the direct path never imports litellm."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ctxprec.scorer.judge.prices import (
    UNPRICED,
    cost_map_path,
    load_cost_map,
    model_prices,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# Providers whose chat models are swept, each with and without its prefix. (Some others, such as
# github_copilot, make litellm try a network login inside cost_per_token.)
SWEPT_PROVIDERS = {"openai", "azure", "anthropic", "gemini", "vertex_ai-language-models", "bedrock", "mistral", "groq",
                   "deepseek", "xai", "together_ai", "fireworks_ai", "cohere_chat", "openrouter"}
COMMON_JUDGES = ["openai/gpt-4o-mini", "gpt-4o-mini", "openai/gpt-4o", "gpt-4o", "openai/gpt-4.1-mini", "gpt-4.1-nano",
                 "azure/gpt-4o-mini", "azure/gpt-4o", "anthropic/claude-3-5-haiku-20241022", "claude-3-5-haiku-20241022",
                 "anthropic/claude-3-7-sonnet-20250219", "gemini/gemini-2.0-flash", "mistral/mistral-large-latest",
                 "deepseek/deepseek-chat", "groq/llama-3.1-8b-instant", "openai/ctxprec-stub-judge",
                 "hosted_vllm/my-model", "ollama_chat/llama3", "not-a-model", "openai/"]

LITELLM_COSTS = """
import json, os, sys
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
import litellm
out = {}
for name in json.load(open(sys.argv[1])):
    try:
        prompt, completion = litellm.cost_per_token(model=name, prompt_tokens=1, completion_tokens=1)
        out[name] = [float(prompt), float(completion)]
    except Exception:
        out[name] = [0.0, 0.0]  # litellm does not know it: unpriced, as ctxprec counts it
json.dump(out, open(sys.argv[2], "w"))
"""


def swept_names() -> list[str]:
    costs = load_cost_map()
    assert costs is not None
    names: set[str] = set()
    for key, entry in costs.entries.items():
        if not isinstance(entry, dict) or entry.get("mode") != "chat":
            continue
        provider = entry.get("litellm_provider")
        if provider not in SWEPT_PROVIDERS:
            continue
        names.add(key)
        names.add(key.split("/", 1)[1] if "/" in key else f"{provider}/{key}")
    return sorted(names)


def litellm_costs(names: list[str], tmp_path: Path) -> dict[str, tuple[float, float]]:
    given, got = tmp_path / "names.json", tmp_path / "costs.json"
    given.write_text(json.dumps(names))
    done = subprocess.run([sys.executable, "-c", LITELLM_COSTS, str(given), str(got)], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return {name: (p, c) for name, (p, c) in json.loads(got.read_text()).items()}


def test_the_map_is_found_without_importing_litellm() -> None:
    probe = ("import sys; from ctxprec.scorer.judge.prices import cost_map_path, model_prices; "
             "print(cost_map_path() is not None, model_prices('openai/gpt-4o-mini')[0] > 0, 'litellm' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "False"]


def test_prices_agree_with_litellm_cost_per_token(tmp_path: Path) -> None:
    names = swept_names() + COMMON_JUDGES
    assert len(names) > 1000 and cost_map_path() is not None
    before = {name: model_prices(name) for name in names}
    truth = litellm_costs(names, tmp_path)
    # Off-peak rates depend on the hour: a window may open or close while litellm runs.
    ours = {name: model_prices(name) for name in names}
    differ = {name: (ours[name], truth[name]) for name in names
              if ours[name] != pytest.approx(truth[name], rel=1e-12) and before[name] != pytest.approx(truth[name], rel=1e-12)}
    # Every common judge model agrees exactly; over thousands of swept names a handful of litellm's
    # special cases may not (they are listed if this fails).
    assert not {name: differ[name] for name in COMMON_JUDGES if name in differ}
    assert len(differ) <= len(names) // 500, differ
    assert any(price != UNPRICED for price in ours.values()) and ours["openai/ctxprec-stub-judge"] == UNPRICED


OFF_PEAK_AGREEMENT = """
import json, os, sys
from datetime import datetime, timedelta, timezone
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
from litellm.litellm_core_utils.llm_cost_calc.utils import _is_off_peak
blocks = json.load(open(sys.argv[1]))
start = datetime(2026, 11, 29, 0, 0, tzinfo=timezone.utc)  # a Sunday; 8 days in 10-minute steps
moments = [start + timedelta(minutes=10 * i) for i in range(8 * 24 * 6)]
json.dump({name: [_is_off_peak(block, m) for m in moments] for name, block in blocks.items()}, open(sys.argv[2], "w"))
"""


def test_off_peak_hours_agree_with_litellm(tmp_path: Path) -> None:
    # Every off-peak block in the map, at every 10 minutes of a week (and a day of overlap across
    # the weekday boundary that a Shanghai calendar shifts), open exactly when litellm says it is.
    from datetime import datetime, timedelta, timezone

    costs = load_cost_map()
    assert costs is not None
    blocks = {name: entry["off_peak_pricing"] for name, entry in costs.entries.items()
              if isinstance(entry, dict) and isinstance(entry.get("off_peak_pricing"), dict)}
    assert blocks, "the cost map has no off-peak prices any more: this test and off_peak.py can go"
    given, got = tmp_path / "blocks.json", tmp_path / "open.json"
    given.write_text(json.dumps(blocks))
    done = subprocess.run([sys.executable, "-c", OFF_PEAK_AGREEMENT, str(given), str(got)], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    truth = json.loads(got.read_text())
    start = datetime(2026, 11, 29, 0, 0, tzinfo=timezone.utc)
    moments = [start + timedelta(minutes=10 * i) for i in range(8 * 24 * 6)]
    for name in blocks:
        schedule = costs.schedule(name)
        if schedule.off_peak is None:  # unpriced entries have no schedule to follow
            assert costs.prices(name) == UNPRICED
            continue
        ours = [schedule.off_peak.open_at(m) for m in moments]
        assert ours == truth[name], name
        assert any(ours) and not all(ours), name
        opened = moments[ours.index(True)]
        assert schedule.at(opened) == schedule.off_peak.prices != schedule.standard


def test_priced_model_over_the_direct_path_does_not_import_litellm(tmp_path: Path) -> None:
    # A cold `ctxprec score` against the stub judge with a model name the cost map prices.
    script = """
import asyncio, json, sys
from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.batch import BatchOptions, run_batch

async def main(events, out):
    stub = StubJudge()
    await stub.start()
    try:
        status = await run_batch(BatchOptions(events_path=events, output_path=out, model="openai/gpt-4o-mini",
                                              api_base=stub.url), stderr=sys.stderr)
    finally:
        await stub.stop()
    print(status, "litellm" in sys.modules)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""
    events, out = tmp_path / "events.jsonl", tmp_path / "scores.jsonl"
    events.write_text(json.dumps({"query": "How do I reset my password?", "output": "Open Settings and reset it.",
                                  "contexts": ["Open Settings to reset your password.", "Cats purr."]}) + "\n")
    done = subprocess.run([sys.executable, "-c", script, str(events), str(out)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={"OPENAI_API_KEY": "test-key", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "False"]
    record = json.loads(out.read_text())
    prompt_price, completion_price = model_prices("openai/gpt-4o-mini")
    usage = record["judge"]
    assert usage["cost_usd"] == pytest.approx(usage["prompt_tokens"] * prompt_price
                                              + usage["completion_tokens"] * completion_price, rel=1e-9)
    assert usage["cost_usd"] > 0
