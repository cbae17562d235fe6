"""A LangChain retriever, then the answer from the OpenAI SDK's chat completions (the fake model
server), under one app span per question: OpenTelemetry's own GenAI instrumentations
(`opentelemetry-instrumentation-genai-langchain` for the retriever, `opentelemetry-instrumentation-openai-v2`
for the model call).

Content capture (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`, read by both):
- `span`: `span_only`, prompts, completions, the query and the documents on the spans;
- `off`: unset, nothing of the content anywhere (the retrieval span keeps its operation name only);
- `events`: `event_only` for the model call, whose prompt and completion then travel only as OTLP
  log records (`gen_ai.client.inference.operation.details`), the retriever traced by OpenInference
  (which records documents whatever that variable says).
"""
from __future__ import annotations

from typing import Any

from tests.realtraffic.agents.telemetry import Telemetry, setup
from tests.realtraffic.apps.corpus import DOC_BY_ID, QUESTION_BY_TEXT, format_contexts

VARIANTS = ("span", "off", "events")
CONTENT = {"span": "span_only", "off": "", "events": "event_only"}
SYSTEM = "Answer the question using only the context below.\n\nContext:\n{context}"


def telemetry(variant: str, service_name: str) -> Telemetry:
    result = setup(service_name)
    if variant == "events":
        from openinference.instrumentation.langchain import LangChainInstrumentor as OpenInferenceLangChain

        OpenInferenceLangChain().instrument()
    else:
        # doc: otel-genai-langchain
        from opentelemetry.instrumentation.genai.langchain import LangChainInstrumentor

        # Content (query text, documents, messages) only with
        # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only (or span_and_event).
        LangChainInstrumentor().instrument()
        # end doc
    # doc: otel-genai-openai
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: span_only puts prompts and completions on
    # the span, event_only in log records (exported by the logger provider), span_and_event both.
    OpenAIInstrumentor().instrument()
    # end doc
    return result


class RagApp:
    def __init__(self, base_url: str, api_key: str) -> None:
        from langchain_core.callbacks import CallbackManagerForRetrieverRun
        from langchain_core.documents import Document
        from langchain_core.retrievers import BaseRetriever
        from openai import OpenAI
        from opentelemetry import trace

        class KnowledgeBaseRetriever(BaseRetriever):
            """The corpus's ranking for its questions (a vector store would need numpy here)."""

            def _get_relevant_documents(self, query: str, *,
                                        run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
                question = QUESTION_BY_TEXT.get(query)
                ids = question.retrieved_ids if question else ()
                return [Document(id=i, page_content=DOC_BY_ID[i].text) for i in ids]

        self.retriever = KnowledgeBaseRetriever()
        self.client = OpenAI(base_url=base_url, api_key=api_key)
        self.tracer = trace.get_tracer("kestrel.support")
        self.retrieved: dict[str, list[Any]] = {}

    def ask(self, question: str) -> str:
        with self.tracer.start_as_current_span("answer_question"):
            docs = self.retriever.invoke(question)
            self.retrieved[question] = docs
            reply = self.client.chat.completions.create(model="gpt-4o-mini", messages=[
                {"role": "system", "content": SYSTEM.format(context=format_contexts([d.page_content for d in docs]))},
                {"role": "user", "content": question}])
            return str(reply.choices[0].message.content)


def build(variant: str, base_url: str, api_key: str) -> RagApp:
    return RagApp(base_url, api_key)


def ask(app: RagApp, question: str) -> str:
    return app.ask(question)


def retrieved(app: RagApp, question: str) -> list[dict[str, Any]]:
    return [{"id": d.id, "content": d.page_content} for d in app.retrieved.get(question, [])]
