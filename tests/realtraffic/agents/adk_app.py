"""Google ADK `LlmAgent` with a retrieval tool, its model ADK's `LiteLlm` (litellm's OpenAI client)
against the fake model server; traced by ADK's own OpenTelemetry spans alone (`native`), or with
OpenInference's instrumentor (`openinference-instrumentation-google-adk`)."""
from __future__ import annotations

import asyncio
import os
from typing import Any

from tests.realtraffic.agents import tools
from tests.realtraffic.agents.telemetry import Telemetry, setup

VARIANTS = ("openinference", "native")
APP_NAME = "kestrel_support"


def telemetry(variant: str, service_name: str) -> Telemetry:
    result = setup(service_name)
    if variant == "native":  # ADK writes its spans to the global tracer provider by itself
        return result
    # doc: google-adk
    from openinference.instrumentation.google_adk import GoogleADKInstrumentor

    GoogleADKInstrumentor().instrument()
    # end doc
    return result


def search_docs(query: str) -> dict[str, Any]:
    """Search the Kestrel K2 knowledge base; returns the best passages for the query.

    Args:
        query: what to look for.
    """
    # ADK tools return a dict (a bare list would be wrapped as {"result": [...]}).
    return {"documents": tools.search_docs(query)}


def build(variant: str, base_url: str, api_key: str) -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm fetches its cost map otherwise
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import InMemoryRunner

    agent = LlmAgent(name="support_agent", model=LiteLlm(model="openai/gpt-4o-mini", api_base=base_url, api_key=api_key),
                     instruction="Answer questions about the Kestrel K2 e-bike with the search_docs tool.",
                     tools=[search_docs])
    return InMemoryRunner(agent=agent, app_name=APP_NAME)


async def _ask(runner: Any, question: str) -> str:
    from google.genai import types

    session = await runner.session_service.create_session(app_name=APP_NAME, user_id="rider")
    answer = ""
    async for event in runner.run_async(user_id="rider", session_id=session.id,
                                        new_message=types.Content(role="user", parts=[types.Part(text=question)])):
        if event.is_final_response() and event.content and event.content.parts:
            answer = "".join(part.text or "" for part in event.content.parts)
    return answer


def ask(runner: Any, question: str) -> str:
    return asyncio.run(_ask(runner, question))
