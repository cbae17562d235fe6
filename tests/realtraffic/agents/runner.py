"""Run one agent app under one instrumentor, exporting traces, logs and metrics with the real
OTLP/HTTP exporters to `OTEL_EXPORTER_OTLP_ENDPOINT`, its model served by the fake model server.

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 .venv-agents/bin/python -m tests.realtraffic.agents.runner \
        --app pydantic-ai --variant genai --service-name agents --out result.json

Each run in its own process: instrumentors patch classes globally. `--out` gets `{"app", "variant",
"runs": [{"query", "contexts", "context_ids", "answer", "tool"}]}`: per question, what the tool
returned (in its order) and what the agent answered.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.realtraffic.agents import tools
from tests.realtraffic.agents.fake_llm import FAKE_API_KEY, WEATHER_CITY, fake_llm_server
from tests.realtraffic.apps.corpus import QUESTIONS

APPS = {
    "pydantic-ai": "pydantic_ai_app",
    "openai-agents": "openai_agents_app",
    "otel-genai": "otel_genai_app",
    "dspy": "dspy_app",
    "smolagents": "smolagents_app",
    "google-adk": "adk_app",
    "crewai": "crewai_app",
}
WEATHER_QUESTION = f"What is the weather like in {WEATHER_CITY}?"


def _module(app: str) -> Any:
    return importlib.import_module(f"tests.realtraffic.agents.{APPS[app]}")


def _run(module: Any, app: Any, query: str) -> dict[str, Any]:
    """What the app retrieved (its own record: a tool's calls, or the app's retriever) and answered."""
    answer = module.ask(app, query)
    hits = module.retrieved(app, query) if hasattr(module, "retrieved") else tools.retrieved_for(query)
    return {"query": query, "contexts": [h["content"] for h in hits], "context_ids": [h["id"] for h in hits],
            "answer": answer, "tool": "search_docs" if hits else ("get_weather" if tools.CALLS.weather else None)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--app", required=True, choices=sorted(APPS))
    parser.add_argument("--variant", required=True)
    parser.add_argument("--service-name", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        parser.error("set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://127.0.0.1:4318)")
    module = _module(args.app)
    if args.variant not in module.VARIANTS:
        parser.error(f"--variant for {args.app}: one of {', '.join(module.VARIANTS)}")
    questions = [WEATHER_QUESTION] if args.variant == "weather" else [q.text for q in QUESTIONS]
    telemetry = module.telemetry(args.variant, args.service_name)
    with fake_llm_server() as base_url:
        app = module.build(args.variant, base_url, FAKE_API_KEY)
        runs = [_run(module, app, q) for q in questions]
    telemetry.shutdown()
    args.out.write_text(json.dumps({"app": args.app, "variant": args.variant, "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
