"""`ctxprec serve` says what it is doing: one start line per input, judge, output and the metrics
address; judge and exporter failures as WARNINGs with their kind (the first at once, then a count
per minute); one summary line per minute; text or JSON lines."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge
from tests.collector.rag_app import RagApp, running, serve_config, wait_until

MakeStub = Callable[..., Awaitable[StubJudge]]
DOCS = ["[relevant] Reset it under Settings > Security.", "[irrelevant] Our pricing plans."]


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed on exit: nothing listens there


def _serve(*flags: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPREC_")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", OPENAI_API_KEY="test")
    return subprocess.Popen([sys.executable, "-m", "ctxprec.collector.cli", "serve", "--otlp-grpc", "off",
                             "--otlp-http", "127.0.0.1:0", "--metrics", "127.0.0.1:0", *flags],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stderr_until(proc: subprocess.Popen[bytes], needle: str, timeout_s: float) -> list[str]:
    """Lines of stderr read until one contains `needle` (or the deadline)."""
    assert proc.stderr is not None
    os.set_blocking(proc.stderr.fileno(), False)
    lines: list[str] = []
    buffer = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        chunk = proc.stderr.read()
        if chunk:
            buffer += chunk.decode("utf-8", errors="replace")
            *complete, buffer = buffer.split("\n")
            lines.extend(complete)
            if any(needle in line for line in lines):
                return lines
        time.sleep(0.05)
    return lines


def test_a_dead_judge_is_a_warning_within_seconds_of_start() -> None:
    proc = _serve("--judge-model", "openai/gpt-4o-mini", "--judge-api-base", f"http://127.0.0.1:{_dead_port()}/v1")
    try:
        started = time.monotonic()
        lines = _stderr_until(proc, "unreachable", timeout_s=10)
        elapsed = time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(10)
    warning = [line for line in lines if "WARNING" in line and "unreachable" in line]
    assert warning, "\n".join(lines)
    assert elapsed < 5.0
    assert "judge openai/gpt-4o-mini" in warning[0] and "no connection to http://127.0.0.1:" in warning[0]
    # The start lines name every part: inputs, judge, output, metrics.
    text = "\n".join(lines)
    for start_line in ("input: OTLP/HTTP on 127.0.0.1:", "judge: openai/gpt-4o-mini at http://127.0.0.1:",
                       "output: no OTLP write-back", "metrics: http://127.0.0.1:"):
        assert start_line in text, text


def test_json_log_lines_for_log_pipelines() -> None:
    proc = _serve("--log-format", "json")
    try:
        lines = _stderr_until(proc, "metrics:", timeout_s=15)
    finally:
        proc.terminate()
        proc.wait(10)
    records = [json.loads(line) for line in lines if line.strip()]
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any(r["level"] == "warning" and "no judge configured" in r["message"] for r in records)
    assert any(r["message"].startswith("input: OTLP/HTTP on 127.0.0.1:") for r in records)


async def test_judge_failures_are_warned_once_then_counted_and_scores_summarised(
        make_stub_judge: MakeStub, caplog: pytest.LogCaptureFixture) -> None:
    failing = await make_stub_judge(error_rate=1.0, fault_kinds=("server_error",))
    caplog.set_level(logging.INFO)
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", failing.url, "--judge-api-key", "k",
                          "--judge-max-retries", "0")
    async with running(config) as pipeline:
        pipeline.activity_interval_s = 0.3
        app = RagApp(protocol="http", port=pipeline.otlp_http_port, service="support-bot")
        for i in range(4):
            app.openinference(f"How do I reset my password? #{i}", DOCS, "Open Settings.")
        await app.flush()
        await app.close()
        await wait_until(lambda: pipeline.fanout.counts.get("failed", 0) >= 4, what="four failed scores")
        await wait_until(lambda: any("more failure" in r.getMessage() for r in caplog.records), timeout=5,
                         what="the per-minute count of failures")
    messages = [r.getMessage() for r in caplog.records]
    first = [m for m in messages if m.startswith("judge openai/stub: server_error")]
    assert len(first) == 1  # one line at once, not one per failure
    counted = [m for m in messages if m.startswith("judge openai/stub:") and "more failure" in m]
    assert counted and "server_error" in counted[0]
    summaries = [m for m in messages if m.startswith("last minute:")]
    assert any("4 failed" in m for m in summaries), summaries


async def test_the_minute_summary_shows_scores_per_service(make_stub_judge: MakeStub,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    stub = await make_stub_judge()
    caplog.set_level(logging.INFO)
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k")
    async with running(config) as pipeline:
        pipeline.activity_interval_s = 0.3
        for service in ("support-bot", "search"):
            app = RagApp(protocol="http", port=pipeline.otlp_http_port, service=service)
            app.openinference("How do I reset my password?", DOCS, "Open Settings.")
            await app.flush()
            await app.close()
        await wait_until(lambda: pipeline.fanout.counts.get("evaluated", 0) >= 2, what="two scores")
        await asyncio.sleep(0.8)
    summaries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("last minute:")]
    scored = [m for m in summaries if "2 retrievals evaluated" in m]
    assert scored, summaries
    assert "search 1.00" in scored[0] and "support-bot 1.00" in scored[0]  # relevant at rank 1: MAP 1
    assert "spans received" in scored[0]
