"""Captures what the agent apps send: runs each case with `OTEL_EXPORTER_OTLP_ENDPOINT` at a plain
HTTP server that writes every POST body, unchanged, to tests/fixtures/otlp/<case>/ (traces
`NNN.pb`, logs `logs-NNN.pb`, metrics `metrics-NNN.pb`, each numbered in arrival order), and the
app's own report of what it retrieved and answered to tests/fixtures/agent_runs/<case>.json.

    .venv/bin/python -m tests.realtraffic.agents.capture                  # every case
    .venv/bin/python -m tests.realtraffic.agents.capture --only pydantic-ai
    .venv/bin/python -m tests.realtraffic.agents.capture --show pydantic-ai-genai   # span trees, log records
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
from pathlib import Path

from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from tests.helpers.otlp_capture import plain
from tests.realtraffic.agents.cases import CASES, Case, run_case
from tests.realtraffic.capture_js import otlp_json, show_requests

ROOT = Path(__file__).resolve().parents[3]
OTLP_FIXTURES = ROOT / "tests" / "fixtures" / "otlp"
RUN_FIXTURES = ROOT / "tests" / "fixtures" / "agent_runs"
PREFIX = {"/v1/traces": "", "/v1/logs": "logs-", "/v1/metrics": "metrics-"}


class BodyWriter:
    """Answers every OTLP/HTTP export with 200 and keeps its body as it came."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, str, bytes]] = []  # (path, content type, body)

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies.append((request.path, request.content_type, await request.read()))
        return web.Response(body=b"", content_type="application/x-protobuf")

    def write(self, out: Path) -> list[Path]:
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        counts = dict.fromkeys(PREFIX, 0)
        written = []
        for path, content_type, body in self.bodies:
            suffix = ".json" if content_type == "application/json" else ".pb"
            file = out / f"{PREFIX[path]}{counts[path]:03d}{suffix}"
            counts[path] += 1
            file.write_bytes(body)
            written.append(file)
        return written


async def capture(case: Case, python: Path | None) -> list[Path]:
    writer = BodyWriter()
    app = web.Application(client_max_size=64 << 20)
    for path in PREFIX:
        app.router.add_post(path, writer.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        report = await run_case(case, endpoint=f"http://127.0.0.1:{port}", service=f"capture-{case.name}",
                                python=python)
        await asyncio.sleep(0.3)
    finally:
        await runner.cleanup()
    if not any(path == "/v1/traces" for path, _, _ in writer.bodies):
        raise RuntimeError(f"{case.name}: no trace request reached the capture server")
    RUN_FIXTURES.mkdir(parents=True, exist_ok=True)
    (RUN_FIXTURES / f"{case.name}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return writer.write(OTLP_FIXTURES / case.name)


def show(name: str, width: int = 200) -> None:
    """Prints a capture's spans as trees and its log records, each attribute on its own line."""
    folder = OTLP_FIXTURES / name
    show_requests([otlp_json(path.read_bytes()) for path in sorted(folder.glob("[0-9]*.pb"))], width)
    for path in sorted(folder.glob("logs-*.pb")):
        for rl in ExportLogsServiceRequest.FromString(path.read_bytes()).resource_logs:
            for sl in rl.scope_logs:
                for record in sl.log_records:
                    print(f"log {record.event_name} trace {record.trace_id.hex()[:8]} span {record.span_id.hex()[:8]}"
                          f" body={str(plain(record.body))[:width]}")
                    for kv in record.attributes:
                        print(f"    {kv.key} = {str(plain(kv.value))[:width]}")


async def main(only: str | None, python: Path | None) -> None:
    for case in CASES:
        if (only and not case.name.startswith(only)) or (case.capture_only and not only):
            continue
        files = await capture(case, python)
        print(f"{case.name}: {len(files)} requests -> {OTLP_FIXTURES / case.name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", help="cases whose name starts with this")
    parser.add_argument("--show", metavar="CASE", help="print a capture instead")
    parser.add_argument("--python", type=Path, help="the app's interpreter (default .venv-agents/bin/python)")
    args = parser.parse_args()
    if args.show:
        show(args.show)
    else:
        asyncio.run(main(args.only, args.python))
