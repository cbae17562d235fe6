"""Haystack RAG app: InMemoryBM25Retriever -> ChatPromptBuilder -> chat generator.

Two generators: a canned component, and Haystack's real OpenAIChatGenerator whose HTTP
client is an httpx.MockTransport serving canned completions (fake_openai.py). OpenLLMetry's Haystack
instrumentor only traces OpenAIGenerator/OpenAIChatGenerator (and Pipeline.run), so it
needs the second to produce an LLM span.
"""

from __future__ import annotations

import os
from typing import Any, Literal

# Haystack reports usage to its telemetry service on pipeline runs; no network here.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from haystack import Document, Pipeline, component
from haystack.components.builders import ChatPromptBuilder
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.utils import Secret
from opentelemetry.sdk.trace import TracerProvider

from .corpus import DOCS, TOP_K, RunResult, canned_answer_for
from .fake_openai import FAKE_API_KEY, FAKE_BASE_URL, FAKE_MODEL, mock_transport

GeneratorKind = Literal["canned", "openai"]

TEMPLATE = [
    ChatMessage.from_system("Answer the question using only the context below."),
    ChatMessage.from_user(
        "Context:\n{% for doc in documents %}{{ doc.content }}\n\n{% endfor %}Question: {{ question }}"
    ),
]


@component
class CannedChatGenerator:
    """A chat generator that returns the corpus's canned answer for the question in the prompt."""

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage]) -> dict[str, list[ChatMessage]]:
        prompt = "\n".join(m.text or "" for m in messages)
        reply = ChatMessage.from_assistant(canned_answer_for(prompt), meta={"model": "canned-chat-model"})
        return {"replies": [reply]}


def _make_generator(kind: GeneratorKind) -> Any:
    if kind == "canned":
        return CannedChatGenerator()
    return OpenAIChatGenerator(
        api_key=Secret.from_token(FAKE_API_KEY),
        model=FAKE_MODEL,
        api_base_url=FAKE_BASE_URL,
        max_retries=0,
        http_client_kwargs={"transport": mock_transport()},
    )


def instrument(instrumentor: str, provider: TracerProvider) -> None:
    if instrumentor == "openinference":
        # doc: haystack-openinference
        from openinference.instrumentation.haystack import HaystackInstrumentor

        HaystackInstrumentor().instrument(tracer_provider=provider)
        # end doc
    elif instrumentor == "openllmetry":
        from opentelemetry.instrumentation.haystack import (
            HaystackInstrumentor as TraceloopInstrumentor,
        )

        TraceloopInstrumentor().instrument(tracer_provider=provider)
    else:
        raise ValueError(f"no {instrumentor} instrumentor for haystack")


class HaystackApp:
    def __init__(self, generator: GeneratorKind) -> None:
        store = InMemoryDocumentStore()
        store.write_documents([Document(id=d.doc_id, content=d.text) for d in DOCS])
        self.retriever = InMemoryBM25Retriever(document_store=store, top_k=TOP_K)
        self.prompt_builder = ChatPromptBuilder(template=TEMPLATE, required_variables=["question", "documents"])
        self.llm = _make_generator(generator)
        self.pipeline = Pipeline()
        self.pipeline.add_component("retriever", self.retriever)
        self.pipeline.add_component("prompt_builder", self.prompt_builder)
        self.pipeline.add_component("llm", self.llm)
        self.pipeline.connect("retriever.documents", "prompt_builder.documents")
        self.pipeline.connect("prompt_builder.prompt", "llm.messages")

    def run_direct(self, question: str) -> RunResult:
        out = self.pipeline.run(
            {"retriever": {"query": question}, "prompt_builder": {"question": question}},
            include_outputs_from={"retriever"},
        )
        return _result(question, out["retriever"]["documents"], out["llm"]["replies"][0])

    def run_sequential(self, question: str) -> RunResult:
        if hasattr(self.llm, "warm_up"):
            self.llm.warm_up()
        docs = self.retriever.run(query=question)["documents"]
        messages = self.prompt_builder.run(question=question, documents=docs)["prompt"]
        reply = self.llm.run(messages=messages)["replies"][0]
        return _result(question, docs, reply)


def _result(question: str, docs: list[Document], reply: ChatMessage) -> RunResult:
    return RunResult(
        query=question,
        contexts=[d.content or "" for d in docs],
        context_ids=[d.id for d in docs],
        answer=reply.text or "",
    )


def build_app(generator: GeneratorKind = "canned") -> HaystackApp:
    return HaystackApp(generator)
