"""Scenario: a second `ctxprec serve` given an address the first one listens on. It refuses to
start, in one line on stderr that names the flag (nothing printed before it), for each listener:
OTLP/gRPC, OTLP/HTTP and the metrics port. gRPC's default SO_REUSEPORT let a second instance
start on the first one's --otlp-grpc address, and the kernel split the first one's connections
between them (52 of 100 traces went to the second); now every trace reaches the first."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge
from tests.chaos.scrape_http import scrape_metrics, total
from tests.collector.rag_app import RagApp
from tests.helpers.processes import free_port, stop_process, wait_listening

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FLAGS = ("--otlp-grpc", "--otlp-http", "--metrics")


def serve_args(ports: dict[str, int], judge_url: str) -> list[str]:
    args = [sys.executable, "-m", "ctxprec.collector.cli", "serve", "--judge-model", "openai/stub",
            "--judge-api-base", judge_url, "--judge-api-key", "k", "--sample-rate", "1"]
    for flag in FLAGS:
        args += [flag, f"127.0.0.1:{ports[flag]}"]
    return args


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("CTXPREC_", "OTEL_"))}
    out["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return out


async def test_a_second_instance_on_a_used_address_refuses_naming_the_flag(
        make_stub_judge: Callable[..., Awaitable[StubJudge]], tmp_path: Path) -> None:
    stub = await make_stub_judge()
    first_ports = {flag: free_port() for flag in FLAGS}
    log_path = tmp_path / "first.log"
    with open(log_path, "wb") as log:
        first = subprocess.Popen(serve_args(first_ports, stub.url), stdout=log, stderr=subprocess.STDOUT,
                                 env=env(), cwd=REPO)
    try:
        for port in first_ports.values():
            await asyncio.to_thread(wait_listening, first, port, name="the first serve", log_path=log_path,
                                    timeout_s=30)
        for flag in FLAGS:
            ports = {other: free_port() for other in FLAGS}
            ports[flag] = first_ports[flag]
            second = await asyncio.to_thread(subprocess.run, serve_args(ports, stub.url), capture_output=True,
                                             text=True, env=env(), cwd=REPO, timeout=60)
            assert second.returncode == 1, (flag, second.stderr)
            assert second.stdout == ""
            assert second.stderr.splitlines() == [
                f"ctxprec serve: cannot start: {flag} 127.0.0.1:{first_ports[flag]} is already in use (another "
                f"ctxprec serve, or another server, listens there); stop it or give {flag} another address"]

        # The first one still gets all of its traffic.
        app = RagApp(protocol="grpc", port=first_ports["--otlp-grpc"])
        for i in range(20):
            app.openinference(f"question {i}", ["a document"], "an answer")
        await app.flush()
        await app.close()
        metrics = await scrape_metrics(f"http://127.0.0.1:{first_ports['--metrics']}")
        assert total(metrics, "ctxprec_spans_received_total", receiver="otlp_grpc") == 60
    finally:
        stop_process(first)
