"""What a serving sidecar tells an operator: its score records carry the question and a document's
first words (cut and redacted like every other text it writes out); `/diagnostics/` lists its
endpoints behind the metrics token; /metrics has no `_created` series; a service without an alarm
is never said to drift; and a port already taken is reported without a spurious shutdown line
before it. Real OTLP from the OpenTelemetry SDK into `ctxprec serve`, the local judge."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from ctxprec.collector.model import Outcome

from tests.collector.rag_app import RagApp, running, serve_config, wait_until

pytestmark = pytest.mark.slow

TOKEN = "operator-T0KEN"
EMAIL = "jane.doe@example.com"
QUERY = f"Why was the refund for {EMAIL} refused although the order was placed only last week?"
ANSWER = "Refunds are refused for orders older than 30 days."
DOCS = [f"Refunds for {EMAIL}: orders older than 30 days are refused, whatever the reason given.",
        "Our office is closed on public holidays."]


class Recorder:
    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def emit(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


async def _get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers=headers) as response:
            return response.status, await response.text()


async def test_records_diagnostics_and_metrics_of_a_serving_sidecar(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    config = serve_config("--judge-model", "local", "--sample-rate", "1", "--redact-pii", "--record-text-chars", "48",
                          "--metrics-token-file", str(token_file))
    recorder = Recorder()
    async with running(config) as pipeline:
        pipeline.add_sink(recorder)
        app = RagApp(protocol="http", port=pipeline.otlp_http_port)
        app.openllmetry(QUERY, DOCS, ANSWER)  # documents without ids
        await app.flush()
        await app.close()
        await wait_until(lambda: bool(recorder.outcomes), what="the score at the sink")
        base = pipeline.metrics_url

        assert (await _get(f"{base}/diagnostics/"))[0] == 401  # the same access rule as the endpoints
        status, body = await _get(f"{base}/diagnostics/", TOKEN)
        assert status == 200
        endpoints = {e["path"]: e["about"] for e in json.loads(body)["endpoints"]}
        assert set(endpoints) >= {"/diagnostics/documents", "/diagnostics/drift", "/diagnostics/top_k"}
        assert all(endpoints.values())
        for path in endpoints:
            assert (await _get(f"{base}{path}", TOKEN))[0] == 200, path

        status, metrics = await _get(f"{base}/metrics", TOKEN)
        assert status == 200 and "ctxprec_samples_total" in metrics and "_created" not in metrics

        status, body = await _get(f"{base}/diagnostics/drift", TOKEN)
        (service,) = json.loads(body)["services"]
        assert service["alarmed"] is False and service["now"]["direction"] is None
        assert service["now"]["message"] == ("no drift in service 'support-bot': the detector is still learning "
                                             "its baseline")

    (outcome,) = recorder.outcomes
    record = outcome.record
    assert record is not None and record["error"] is None
    assert record["query"].startswith("Why was the refund for [EMAIL] refused") and record["query"].endswith("\u2026")
    assert len(record["query"]) <= 48
    assert record["line"] is None and record["event_id"] is None
    first, second = record["verdicts"]
    assert first["document"].startswith("sha256:") and first["preview"].startswith("Refunds for [EMAIL]: orders")
    assert second["preview"] == "Our office is closed on public holidays."
    assert EMAIL not in json.dumps(record)


def test_a_port_already_taken_is_reported_without_a_shutdown_line_before_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "ctxprec.collector.cli", "serve", "--judge-model", "local",
                               "--otlp-grpc", "off", "--otlp-http", "127.0.0.1:0", "--metrics", f"127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "cannot start" in done.stderr and str(port) in done.stderr
    assert "shutdown deadline" not in done.stderr and "deciding them failed" not in done.stderr
