"""Runs the real framework apps of tests/realtraffic/apps in their own virtual environment
(.venv-apps, built by `make test`), each run in its own process, exporting with the real OTLP
exporter to the endpoints given."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[2]
APPS_PYTHON = ROOT / ".venv-apps" / "bin" / "python"

# (framework, instrumentor) pairs that the apps support; Haystack is instrumented by OpenInference
# only (OpenLLMetry's Haystack instrumentor does not load with haystack-ai 3).
COMBINATIONS = (("langchain", "openinference"), ("langchain", "openllmetry"), ("llamaindex", "openinference"),
                ("llamaindex", "openllmetry"), ("haystack", "openinference"))
SHAPES = ("direct", "asgi", "sequential")


@dataclass(frozen=True)
class AppRun:
    query: str
    contexts: list[str]
    context_ids: list[str]
    answer: str


def require_apps_environment() -> Path:
    if not APPS_PYTHON.exists():
        raise RuntimeError(f"{APPS_PYTHON} is missing: run `make test` (it builds the framework apps' environment)")
    return APPS_PYTHON


async def run_app(framework: str, instrumentor: str, shape: str, *, endpoints: Sequence[str], service: str,
                  project: str | None = None, timeout_s: float = 180.0) -> list[AppRun]:
    """Runs every question of the app's corpus; returns what the app retrieved and answered."""
    python = require_apps_environment()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        args = [str(python), "-m", "tests.realtraffic.apps.runner", "--framework", framework,
                "--instrumentor", instrumentor, "--shape", shape, "--service-name", service, "--out", str(out)]
        for endpoint in endpoints:
            args += ["--endpoint", endpoint]
        if project:
            args += ["--project", project]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CTXPREC_", "PYTHON"))}
        env["HAYSTACK_TELEMETRY_ENABLED"] = "False"
        report = await run_report(args, env=env, out=out, what=f"{framework}/{instrumentor}/{shape} app",
                                  timeout_s=timeout_s)
    return runs_of(report)


async def run_app_module(module: str, *, endpoints: Sequence[str], service: str, env: dict[str, str] | None = None,
                         args: Sequence[str] = (), timeout_s: float = 180.0) -> list[AppRun]:
    """Runs one of the apps that have a module of their own (`genai_util_app`, `milvus_app`): every
    question of the corpus, `env` added to a clean environment."""
    python = require_apps_environment()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [str(python), "-m", f"tests.realtraffic.apps.{module}", "--service-name", service, "--out", str(out),
                   *args]
        for endpoint in endpoints:
            command += ["--endpoint", endpoint]
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CTXPREC_", "PYTHON"))}
        report = await run_report(command, env={**clean, **(env or {})}, out=out, what=f"{module} app",
                                  timeout_s=timeout_s)
    return runs_of(report)


async def run_report(args: Sequence[str], *, env: dict[str, str], out: Path, what: str,
                     timeout_s: float) -> dict[str, Any]:
    """Runs an app process from the repository root; returns the JSON report it wrote to `out`."""
    proc = await asyncio.create_subprocess_exec(*args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        sys.stderr.write(stderr.decode(errors="replace"))
        raise RuntimeError(f"{what} exited {proc.returncode}: {stderr.decode(errors='replace')[-2000:]}")
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return report


def runs_of(report: dict[str, Any]) -> list[AppRun]:
    return [AppRun(r["query"], r["contexts"], r.get("context_ids") or [], r["answer"]) for r in report["runs"]]
