"""smolagents `ToolCallingAgent` with a retrieval tool, its `OpenAIServerModel` (the OpenAI client)
against the fake model server, which ends each run through smolagents' `final_answer` tool;
instrumented by OpenInference (`openinference-instrumentation-smolagents`)."""
from __future__ import annotations

from typing import Any

from tests.realtraffic.agents import tools
from tests.realtraffic.agents.telemetry import Telemetry, setup

VARIANTS = ("openinference",)


def telemetry(variant: str, service_name: str) -> Telemetry:
    result = setup(service_name)
    # doc: smolagents
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    SmolagentsInstrumentor().instrument()
    # end doc
    return result


def build(variant: str, base_url: str, api_key: str) -> Any:
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def search_docs(query: str) -> list[dict[str, Any]]:
        """Search the Kestrel K2 knowledge base; returns the best passages for the query.

        Args:
            query: what to look for.
        """
        return tools.search_docs(query)

    model = OpenAIServerModel(model_id="gpt-4o-mini", api_base=base_url, api_key=api_key)
    return ToolCallingAgent(tools=[search_docs], model=model, max_steps=3, verbosity_level=0)


def ask(agent: Any, question: str) -> str:
    return str(agent.run(question))
