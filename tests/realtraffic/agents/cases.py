"""Every agent app x instrumentor the tests run (a `Case`), and how to run one: the app in its own
process in its virtual environment (.venv-agents, .venv-crewai or .venv-apps, built by `make
test`), exporting to the OTLP/HTTP endpoint given as `OTEL_EXPORTER_OTLP_ENDPOINT`."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.framework_apps import ROOT, run_report

AGENTS_VENV = ".venv-agents"


@dataclass(frozen=True)
class Case:
    name: str
    app: str
    variant: str
    env: dict[str, str] = field(default_factory=dict)
    # What ctxprec should decide for each retrieval: evaluated, no_content (content capture off),
    # or none (the agent retrieved nothing).
    expect: str = "evaluated"
    # Where the answer is read: the LLM span that consumed the retrieval, or the agent's output
    # where no such span holds it as text (`ctxprec.answer_source`).
    answer_source: str = "llm_span"
    # "agents": tests/realtraffic/agents/runner.py in .venv-agents (app, variant); "apps": the
    # framework apps' runner in .venv-apps (tests/realtraffic/apps/runner.py), with `apps_args`.
    runner: str = "agents"
    venv: str = AGENTS_VENV  # the agents runner's environment (CrewAI has one of its own)
    apps_args: tuple[str, ...] = ()
    # Captured once in an environment of its own (tests/fixtures/otlp/README.md says which); not run by the tests.
    capture_only: bool = False


CASES: tuple[Case, ...] = (
    Case("pydantic-ai-genai", "pydantic-ai", "genai"),
    Case("pydantic-ai-openinference", "pydantic-ai", "openinference"),
    Case("pydantic-ai-weather", "pydantic-ai", "weather", expect="none"),
    Case("openai-agents-responses", "openai-agents", "responses"),
    Case("openai-agents-chat", "openai-agents", "chat"),
    Case("openai-agents-retriever", "openai-agents", "retriever"),
    Case("otel-genai-span", "otel-genai", "span", {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"}),
    Case("otel-genai-events", "otel-genai", "events",
         {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "event_only"}),
    Case("otel-genai-off", "otel-genai", "off", expect="no_content"),
    Case("dspy-openinference", "dspy", "openinference"),
    # smolagents answers through its final_answer tool (the last model turn holds a tool call, not
    # text); ADK's model span encloses the tool call instead of following it.
    Case("smolagents-openinference", "smolagents", "openinference", answer_source="chain_output"),
    Case("google-adk-openinference", "google-adk", "openinference", answer_source="chain_output"),
    # ADK's own spans carry content with OpenTelemetry's GenAI variable (without it: no tool arguments, no result).
    Case("google-adk-native", "google-adk", "native", {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"}),
    Case("crewai-openinference", "crewai", "openinference", venv=".venv-crewai"),
    Case("langchain-openllmetry-nocontent", "langchain", "openllmetry", {"TRACELOOP_TRACE_CONTENT": "false"},
         expect="no_content", runner="apps",
         apps_args=("--framework", "langchain", "--instrumentor", "openllmetry", "--shape", "direct")),
    Case("llamaindex-rerank-openinference", "llamaindex", "openinference", runner="apps",
         apps_args=("--framework", "llamaindex", "--instrumentor", "openinference", "--shape", "direct", "--rerank")),
    # openai-v2's v1.30 path (prompts and completions as gen_ai.* events), only with util-genai 0.4b0.
    Case("otel-genai-events-legacy", "otel-genai", "events", {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
         capture_only=True),
)


def _python(case: Case, python: Path | None) -> Path:
    if python:
        return python
    path = ROOT / (case.venv if case.runner == "agents" else ".venv-apps") / "bin" / "python"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run `make test` (it builds the apps' environments)")
    return path


async def run_case(case: Case, *, endpoint: str, service: str, timeout_s: float = 120.0,
                   python: Path | None = None) -> dict[str, Any]:
    """Runs the case's app once (every question), in the case's environment unless `python` says
    otherwise; returns its report."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        if case.runner == "apps":
            args = [str(_python(case, python)), "-m", "tests.realtraffic.apps.runner", *case.apps_args,
                    "--endpoint", f"{endpoint}/v1/traces", "--service-name", service, "--out", str(out)]
        else:
            args = [str(_python(case, python)), "-m", "tests.realtraffic.agents.runner", "--app", case.app,
                    "--variant", case.variant, "--service-name", service, "--out", str(out)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CTXPREC_", "PYTHON", "OPENAI_"))}
        env.update(case.env)
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
        return await run_report(args, env=env, out=out, what=f"{case.name} app", timeout_s=timeout_s)
