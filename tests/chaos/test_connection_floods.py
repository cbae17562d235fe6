"""Floods of idle connections against a `ctxprec serve` process whose open-file limit is low (256,
soft and hard: what a container or shell may impose). With the connection cap below the limit
the flood is refused at the cap and /healthz keeps answering; with a cap the limit cannot hold,
the sidecar runs out of file descriptors, says so in one WARNING (not a traceback a second) and
counts it, and serves again once the flood is gone."""
from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import AsyncIterator

import aiohttp
import pytest

from tests.chaos.scrape_http import healthz_seconds, scrape_metrics, total
from tests.helpers.processes import free_port

pytestmark = pytest.mark.slow  # a sidecar process per test (also slow by its folder, tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
FILE_LIMIT = 256
FLOOD = 400


def _low_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator:
    started: list[tuple[subprocess.Popen[bytes], Path]] = []

    async def start(*flags: str) -> tuple[int, str, Path]:
        http_port, metrics_port = free_port(), free_port()
        log = tmp_path / f"serve-{len(started)}.log"
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONUNBUFFERED="1")
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ctxprec.collector.cli", "serve", "--otlp-grpc", "off",
                 "--otlp-http", f"127.0.0.1:{http_port}", "--metrics", f"127.0.0.1:{metrics_port}", *flags],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, preexec_fn=_low_file_limit)
        started.append((proc, log))
        url = f"http://127.0.0.1:{metrics_port}"
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                async with aiohttp.ClientSession() as session:
                    async with session.get(f"{url}/healthz") as response:
                        if response.status == 200:
                            return http_port, url, log
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            await asyncio.sleep(0.2)

    try:
        yield start
    finally:
        for proc, _ in started:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


async def flood(port: int, n: int) -> list[asyncio.StreamWriter]:
    """`n` connections that send nothing (those the server refuses are closed by it)."""
    writers = []
    for _ in range(n):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            continue
        writers.append(writer)
    return writers


async def test_a_flood_past_the_cap_is_refused_and_healthz_answers(serve) -> None:
    port, url, log = await serve("--listener-max-connections", "50", "--listener-header-timeout", "30")
    writers = await flood(port, FLOOD)
    try:
        await asyncio.sleep(1.0)
        for _ in range(10):
            assert await healthz_seconds(url) < 2.0
            await asyncio.sleep(0.1)
        m = await scrape_metrics(url)
        assert total(m, "ctxprec_listener_connections_refused_total", listener="otlp_http",
                     reason="too_many") >= FLOOD - 50
        assert total(m, "ctxprec_listener_connections_refused_total", reason="no_file_descriptors") == 0
    finally:
        for writer in writers:
            writer.transport.abort()
    assert "out of system resource" not in log.read_text()


async def test_running_out_of_file_descriptors_is_one_warning_and_counted(serve) -> None:
    port, url, log = await serve("--listener-max-connections", "1000", "--listener-header-timeout", "3")
    assert "open-file limit is 256" in log.read_text()  # the start says the cap cannot be held
    writers = await flood(port, FLOOD)
    try:
        await asyncio.sleep(4.0)  # accept fails about once a second while the descriptors are gone
    finally:
        for writer in writers:
            writer.transport.abort()
    # The flood's connections time out (3 s) and go: the sidecar answers again.
    deadline = time.monotonic() + 15
    while True:
        try:
            assert await healthz_seconds(url) < 2.0
            break
        except (aiohttp.ClientError, asyncio.TimeoutError):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.5)
    m = await scrape_metrics(url)
    assert total(m, "ctxprec_listener_connections_refused_total", listener="otlp_http",
                 reason="no_file_descriptors") >= 1
    text = log.read_text()
    lines = [line for line in text.splitlines() if "no_file_descriptors" in line]
    assert len(lines) == 1 and "WARNING" in lines[0], lines
    assert "Traceback" not in text and "out of system resource" not in text
