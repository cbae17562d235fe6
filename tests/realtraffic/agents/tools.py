"""The tools the agents call: a document search over the shared corpus (a list of `{id, content,
score}`, in the corpus's rank order) and a weather lookup (not a retrieval). Every call is recorded,
so the run's report says what each question retrieved."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.realtraffic.apps.corpus import DOC_BY_ID, QUESTION_BY_TEXT
from tests.realtraffic.agents.fake_llm import WEATHER_REPORT

SCORES = (0.9, 0.7, 0.5)


@dataclass
class Calls:
    searches: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    weather: list[str] = field(default_factory=list)


CALLS = Calls()


def search_docs(query: str) -> list[dict[str, Any]]:
    """Search the Kestrel K2 knowledge base; returns the best passages for the query."""
    question = QUESTION_BY_TEXT.get(query)
    ids = question.retrieved_ids if question else ()
    hits = [{"id": doc_id, "content": DOC_BY_ID[doc_id].text, "score": score} for doc_id, score in zip(ids, SCORES)]
    CALLS.searches.append((query, hits))
    return hits


def get_weather(city: str) -> str:
    """Current weather for a city."""
    CALLS.weather.append(city)
    return f"{WEATHER_REPORT} in {city}"


def retrieved_for(query: str) -> list[dict[str, Any]]:
    """The hits of the last search made for `query` (empty when the agent searched nothing)."""
    for made, hits in reversed(CALLS.searches):
        if made == query:
            return hits
    return []
