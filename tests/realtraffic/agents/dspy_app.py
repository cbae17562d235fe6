"""DSPy program: `dspy.Retrieve` over a retrieval model of the shared corpus, then `dspy.Predict`
(context, question -> answer), its LM (`dspy.LM`, through litellm) against the fake model server;
instrumented by OpenInference (`openinference-instrumentation-dspy`)."""
from __future__ import annotations

import os
from typing import Any

from tests.realtraffic.agents.telemetry import Telemetry, setup
from tests.realtraffic.apps.corpus import DOC_BY_ID, QUESTION_BY_TEXT

VARIANTS = ("openinference",)
SCORES = (0.9, 0.7, 0.5)


def telemetry(variant: str, service_name: str) -> Telemetry:
    result = setup(service_name)
    # doc: dspy
    from openinference.instrumentation.dspy import DSPyInstrumentor

    DSPyInstrumentor().instrument()
    # end doc
    return result


class CorpusRM:
    """A retrieval model as `dspy.Retrieve` calls one: passages with `long_text`, `pid` and `score`."""

    def __init__(self) -> None:
        self.retrieved: dict[str, list[dict[str, Any]]] = {}

    def __call__(self, query: str, k: int = 3, **kwargs: Any) -> list[Any]:
        from dspy.dsp.utils import dotdict

        question = QUESTION_BY_TEXT.get(query)
        ids = (question.retrieved_ids if question else ())[:k]
        passages = [dotdict(long_text=DOC_BY_ID[i].text, pid=i, score=s) for i, s in zip(ids, SCORES)]
        self.retrieved[query] = [{"id": p.pid, "content": p.long_text} for p in passages]
        return passages


class App:
    def __init__(self, base_url: str, api_key: str) -> None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm fetches its cost map otherwise
        import dspy

        self.rm = CorpusRM()
        dspy.configure(lm=dspy.LM("openai/gpt-4o-mini", api_base=base_url, api_key=api_key, cache=False),
                       rm=self.rm)

        class RAG(dspy.Module):
            def __init__(self) -> None:
                super().__init__()
                self.retrieve = dspy.Retrieve(k=3)
                self.generate = dspy.Predict("context, question -> answer")

            def forward(self, question: str) -> Any:
                context = self.retrieve(question).passages
                return self.generate(context=context, question=question)

        self.program = RAG()


def build(variant: str, base_url: str, api_key: str) -> App:
    return App(base_url, api_key)


def ask(app: App, question: str) -> str:
    return str(app.program(question=question).answer)


def retrieved(app: App, question: str) -> list[dict[str, Any]]:
    return app.rm.retrieved.get(question, [])
