"""Pydantic AI agent with a retrieval tool (and one with a weather tool), its OpenAI chat model
against the fake model server. Instrumented by Pydantic AI's own OpenTelemetry instrumentation,
or by that plus OpenInference's span processor (`openinference-instrumentation-pydantic-ai`)."""
from __future__ import annotations

from typing import Any

from tests.realtraffic.agents import tools
from tests.realtraffic.agents.telemetry import Telemetry, setup

VARIANTS = ("genai", "openinference", "weather")


def telemetry(variant: str, service_name: str) -> Telemetry:
    if variant != "openinference":
        return setup(service_name)
    # doc: pydantic-ai-openinference
    from openinference.instrumentation.pydantic_ai import OpenInferenceSpanProcessor

    # Before the exporting processor: it rewrites each span as it ends.
    return setup(service_name, processors=[OpenInferenceSpanProcessor()])
    # end doc


def build(variant: str, base_url: str, api_key: str) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    # doc: pydantic-ai
    # Pydantic AI's own instrumentation, content included (include_content=True is the default).
    Agent.instrument_all()
    # end doc
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=base_url, api_key=api_key))
    if variant == "weather":
        agent = Agent(model, name="weather_agent", instructions="Answer weather questions with the get_weather tool.")
        agent.tool_plain(tools.get_weather)
        return agent
    agent = Agent(model, name="support_agent",
                  instructions="Answer questions about the Kestrel K2 e-bike with the search_docs tool.")
    agent.tool_plain(tools.search_docs)
    return agent


def ask(agent: Any, question: str) -> str:
    return str(agent.run_sync(question).output)
