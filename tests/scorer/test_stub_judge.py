"""The stub judge over real HTTP: its relevance rule, usage accounting, fault injection, run-time
control, and its command line in a process of its own."""
from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ctxprec.collector.stub_judge import StubJudge, StubSettings, content_words

ROOT = Path(__file__).resolve().parents[2]


def data_message(data: dict[str, Any]) -> str:
    return "Judge each context.\nBEGIN_DATA\n" + json.dumps(data) + "\nEND_DATA"


def verdicts_request(contexts: list[tuple[int, str]], *, reference: str = "", query: str = "", kind: str = "output") -> dict:
    data = {
        "task": "verdicts",
        "query": query,
        "reference_kind": kind,
        "reference": reference,
        "contexts": [{"context_index": i, "text": t} for i, t in contexts],
    }
    return {
        "model": "stub",
        "messages": [{"role": "system", "content": "You are a judge."}, {"role": "user", "content": data_message(data)}],
    }


async def post(url: str, body: Any) -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/chat/completions", json=body) as response:
            raw = await response.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = raw
            return response.status, dict(response.headers), payload


def answer(payload: dict) -> Any:
    return json.loads(payload["choices"][0]["message"]["content"])


async def test_relevance_rule_markers_and_content_words(stub_judge: StubJudge) -> None:
    body = verdicts_request(
        [
            (0, "To reset your password open Settings."),  # shares "password", "settings"
            (1, "The cafeteria menu for today."),  # nothing shared
            (2, "[relevant] unrelated words entirely"),  # marker wins
            (3, "[irrelevant] password settings reset"),  # marker wins over shared words
            (4, "about with this that from"),  # stopwords only
            (5, "go to it"),  # words shorter than 4 chars
        ],
        reference="Open SETTINGS, then choose Reset password; it is about this.",
        query="how do i reset?",
    )
    status, _, payload = await post(stub_judge.url, body)
    assert status == 200
    verdicts = answer(payload)["verdicts"]
    assert [v["context_index"] for v in verdicts] == [0, 1, 2, 3, 4, 5]
    assert [v["verdict"] for v in verdicts] == ["yes", "no", "yes", "no", "no", "no"]
    assert "password" in verdicts[0]["reason"]
    assert all(isinstance(v["reason"], str) and v["reason"] for v in verdicts)


async def test_reference_kind_query_uses_the_query_and_subset_indices_are_kept(stub_judge: StubJudge) -> None:
    body = verdicts_request(
        [(7, "billing invoices are monthly"), (3, "password reset steps")],
        reference="billing",  # ignored: the reference kind is query
        query="password help",
        kind="query",
    )
    status, _, payload = await post(stub_judge.url, body)
    assert status == 200
    verdicts = answer(payload)["verdicts"]
    assert [(v["context_index"], v["verdict"]) for v in verdicts] == [(7, "no"), (3, "yes")]


async def test_reason_task_and_usage(stub_judge: StubJudge) -> None:
    data = {"task": "reason", "query": "q", "reference_kind": "query", "reference": "q", "score": 0.83,
            "verdicts": [{"index": 0, "relevant": True}, {"index": 1, "relevant": False}, {"index": 2, "relevant": True}]}
    messages = [{"role": "system", "content": "Explain."}, {"role": "user", "content": data_message(data)}]
    status, _, payload = await post(stub_judge.url, {"model": "m", "messages": messages})
    assert status == 200
    reason = answer(payload)["reason"]
    assert reason.startswith("The score is 0.83 because ")
    assert "1, 3" in reason
    content = payload["choices"][0]["message"]["content"]
    usage = payload["usage"]
    assert usage["prompt_tokens"] == math.ceil(sum(len(m["content"]) for m in messages) / 4)
    assert usage["completion_tokens"] == math.ceil(len(content) / 4)
    assert stub_judge.stats.prompt_tokens == usage["prompt_tokens"]
    assert stub_judge.stats.completion_tokens == usage["completion_tokens"]
    assert stub_judge.stats.responses == {200: 1}


async def test_bad_requests_get_400_naming_the_problem(stub_judge: StubJudge) -> None:
    status, _, payload = await post(stub_judge.url, {"model": "m", "messages": [{"role": "user", "content": "no block"}]})
    assert status == 400 and "BEGIN_DATA" in payload["error"]["message"]
    status, _, payload = await post(
        stub_judge.url, {"model": "m", "messages": [{"role": "user", "content": "BEGIN_DATA\n{not json\nEND_DATA"}]}
    )
    assert status == 400 and "not valid JSON" in payload["error"]["message"]
    async with aiohttp.ClientSession() as session:
        async with session.post(stub_judge.url + "/chat/completions", data=b"{{{") as response:
            assert response.status == 400
    assert stub_judge.stats.responses == {400: 3}


def test_content_words_definition() -> None:
    assert content_words("The Password-reset, about 2FA codes 1234!") == {"password", "reset", "codes", "1234"}


@pytest.mark.parametrize(
    "kind,expected_status",
    [("rate_limit", 429), ("server_error", 500), ("malformed", 200), ("wrong_count", 200)],
)
async def test_each_fault_kind(make_stub_judge, kind: str, expected_status: int) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=(kind,), retry_after_s=2, seed=3)
    asked = [(0, "alpha words"), (1, "beta words"), (2, "gamma words")]
    status, headers, payload = await post(stub.url, verdicts_request(asked, reference="words"))
    assert status == expected_status
    assert stub.stats.faults == {kind: 1}
    if kind == "rate_limit":
        assert headers["Retry-After"] == "2"
    if kind == "malformed":
        with pytest.raises(ValueError):
            json.loads(payload["choices"][0]["message"]["content"])
    if kind == "wrong_count":
        indices = [v["context_index"] for v in answer(payload)["verdicts"]]
        assert sorted(set(indices)) != [0, 1, 2] or len(indices) != 3


async def test_timeout_fault_holds_the_request(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("timeout",), hang_s=0.4)
    started = time.perf_counter()
    status, _, payload = await post(stub.url, verdicts_request([(0, "x words")], reference="words"))
    assert time.perf_counter() - started >= 0.4
    assert status == 200 and answer(payload)["verdicts"][0]["verdict"] == "yes"
    assert stub.stats.faults == {"timeout": 1}


async def test_stop_releases_held_requests(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("timeout",), hang_s=60)
    pending = asyncio.ensure_future(post(stub.url, verdicts_request([(0, "x")], reference="y")))
    await asyncio.sleep(0.2)
    started = time.perf_counter()
    await stub.stop()
    status, _, _ = await asyncio.wait_for(pending, 5)
    assert status == 503
    assert time.perf_counter() - started < 5


async def test_seeded_faults_are_reproducible(make_stub_judge) -> None:
    async def statuses(stub: StubJudge) -> list[int]:
        body = verdicts_request([(0, "a b"), (1, "c d")], reference="x")
        return [(await post(stub.url, body))[0] for _ in range(30)]

    kinds = ("rate_limit", "server_error")
    first = await statuses(await make_stub_judge(error_rate=0.5, fault_kinds=kinds, seed=42))
    second = await statuses(await make_stub_judge(error_rate=0.5, fault_kinds=kinds, seed=42))
    assert first == second
    assert {200, 429, 500} <= set(first)


async def test_latency_and_jitter(make_stub_judge) -> None:
    stub = await make_stub_judge(latency_ms=120, jitter_ms=50, seed=1)
    started = time.perf_counter()
    await asyncio.gather(*(post(stub.url, verdicts_request([(0, "x")], reference="y")) for _ in range(5)))
    elapsed = time.perf_counter() - started
    assert 0.12 <= elapsed < 2.0  # concurrent requests overlap their latency


async def test_control_stats_models_healthz(stub_judge: StubJudge) -> None:
    base = stub_judge.url.removesuffix("/v1")
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/healthz") as response:
            assert response.status == 200 and await response.text() == "ok"
        async with session.get(stub_judge.url + "/models") as response:
            assert (await response.json())["data"][0]["id"] == stub_judge.settings.model
        async with session.post(base + "/control", json={"error_rate": 1, "fault_kinds": "server_error"}) as response:
            assert response.status == 200
            assert (await response.json())["settings"]["fault_kinds"] == ["server_error"]
        async with session.post(base + "/control", json={"error_rate": 7}) as response:
            assert response.status == 400 and "error_rate" in (await response.json())["error"]
        async with session.post(base + "/control", json={"latency": 7}) as response:
            assert response.status == 400 and "latency" in (await response.json())["error"]
    status, _, _ = await post(stub_judge.url, verdicts_request([(0, "x")], reference="y"))
    assert status == 500
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/stats") as response:
            stats = await response.json()
        assert stats == {"requests": 1, "responses": {"500": 1}, "faults": {"server_error": 1},
                         "prompt_tokens": 0, "completion_tokens": 0, "forms": {"off": 1},
                         "max_in_flight": 1, "max_queued": 0, "dropped": 0, "cut": 0}
        async with session.post(base + "/control", json={"error_rate": 0, "reset_stats": True}) as response:
            assert response.status == 200
    assert stub_judge.stats.requests == 0
    status, _, _ = await post(stub_judge.url, verdicts_request([(0, "x")], reference="y"))
    assert status == 200


async def test_required_api_key(make_stub_judge) -> None:
    stub = await make_stub_judge(api_key="k-123")
    status, _, payload = await post(stub.url, verdicts_request([(0, "x")], reference="y"))
    assert status == 401 and "API key" in payload["error"]["message"]
    assert stub.recent[-1].authorization is None


def test_settings_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="error_rate"):
        StubSettings(error_rate=1.5)
    with pytest.raises(ValueError, match="fault_kinds"):
        StubSettings(fault_kinds=("gremlins",))
    with pytest.raises(ValueError, match="latency_ms"):
        StubSettings(latency_ms=-1)


def test_command_line_in_its_own_process() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run(
        [sys.executable, "-m", "ctxprec.collector.stub_judge", "--error-rate", "2"], capture_output=True, text=True, env=env, timeout=30
    )
    assert bad.returncode == 2 and "--error-rate" in bad.stderr and "Traceback" not in bad.stderr
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", "0", "--latency-ms", "5", "--seed", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("stub judge listening on http://127.0.0.1:")
        url = line.split()[-1]
        status, _, payload = asyncio.run(post(url, verdicts_request([(0, "password")], reference="password")))
        assert status == 200 and answer(payload)["verdicts"][0]["verdict"] == "yes"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
