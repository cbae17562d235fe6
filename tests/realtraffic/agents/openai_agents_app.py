"""OpenAI Agents SDK agent with a function tool returning `[{id, content, score}]`, instrumented by
OpenInference (`openinference-instrumentation-openai-agents`); its model the SDK's Responses or
Chat Completions model over the real OpenAI client, against the fake model server. The
`retriever` variant marks the tool RETRIEVER with the instrumentor's `tool_span_kinds`."""
from __future__ import annotations

from typing import Any

from tests.realtraffic.agents import tools
from tests.realtraffic.agents.telemetry import Telemetry, setup

VARIANTS = ("responses", "chat", "retriever")


def telemetry(variant: str, service_name: str) -> Telemetry:
    result = setup(service_name)
    if variant == "retriever":
        # doc: openai-agents-retriever
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        # The tool's span is written as a RETRIEVER span (retrieval.documents) instead of a TOOL span.
        OpenAIAgentsInstrumentor().instrument(tool_span_kinds={"search_docs": "RETRIEVER"})
        # end doc
    else:
        # doc: openai-agents
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        # Replaces the SDK's own trace processor; tool results are recorded as output.value.
        OpenAIAgentsInstrumentor().instrument()
        # end doc
    return result


def build(variant: str, base_url: str, api_key: str) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, function_tool
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    model_class = OpenAIChatCompletionsModel if variant == "chat" else OpenAIResponsesModel
    return Agent(name="support_agent",
                 instructions="Answer questions about the Kestrel K2 e-bike with the search_docs tool.",
                 tools=[function_tool(tools.search_docs)],
                 model=model_class(model="gpt-4o-mini", openai_client=client))


def ask(agent: Any, question: str) -> str:
    from agents import Runner

    return str(Runner.run_sync(agent, question).final_output)
