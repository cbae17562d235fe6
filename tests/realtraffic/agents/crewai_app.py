"""CrewAI crew of one agent with a retrieval tool, its `LLM` (CrewAI's OpenAI provider, the OpenAI
SDK) against the fake model server; traced by OpenInference's CrewAI instrumentor and its OpenAI
instrumentor for the model calls. Runs in .venv-crewai (CrewAI needs the OpenAI SDK 2)."""
from __future__ import annotations

import os
from typing import Any

from tests.realtraffic.agents import tools
from tests.realtraffic.agents.telemetry import Telemetry, setup

VARIANTS = ("openinference",)


def telemetry(variant: str, service_name: str) -> Telemetry:
    # CrewAI's own usage telemetry and trace upload leave the machine: off.
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
    result = setup(service_name)
    # doc: crewai
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument()  # crews, agents, tasks and tool calls
    OpenAIInstrumentor().instrument()  # the model calls (CrewAI's OpenAI provider)
    # end doc
    return result


def build(variant: str, base_url: str, api_key: str) -> Any:
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    @tool("search_docs")
    def search_docs(query: str) -> list[dict[str, Any]]:
        """Search the Kestrel K2 knowledge base; returns the best passages for the query."""
        return tools.search_docs(query)

    agent = Agent(role="Kestrel support agent", goal="Answer questions about the Kestrel K2 e-bike",
                  backstory="You answer from the knowledge base only.", tools=[search_docs],
                  llm=LLM(model="openai/gpt-4o-mini", base_url=base_url, api_key=api_key), verbose=False)
    task = Task(description="Answer the rider's question: {question}", expected_output="A short answer.",
                agent=agent)
    return Crew(agents=[agent], tasks=[task], verbose=False)


def ask(crew: Any, question: str) -> str:
    return str(crew.kickoff(inputs={"question": question}).raw)
