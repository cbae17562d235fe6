"""LangChain RAG app: in-memory vector store retriever, prompt, fake chat model."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from opentelemetry.sdk.trace import TracerProvider

from .corpus import DOCS, QUESTIONS, TOP_K, RunResult, embed_text, format_contexts

PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer the question using only the context below.\n\nContext:\n{context}"),
        ("human", "{question}"),
    ]
)


class CorpusEmbeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [embed_text(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return embed_text(text)


class _RetrievedDocs(BaseCallbackHandler):
    """Records what the retriever returned, so the app can report it without reshaping the chain."""

    def __init__(self) -> None:
        self.documents: list[Document] = []

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.documents = list(documents)


def instrument(instrumentor: str, provider: TracerProvider) -> None:
    if instrumentor == "openinference":
        # doc: langchain-openinference
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)
        # end doc
    elif instrumentor == "openllmetry":
        # doc: langchain-openllmetry
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor().instrument(tracer_provider=provider)
        # end doc
    else:
        raise ValueError(f"no {instrumentor} instrumentor for langchain")


def _format_docs(docs: list[Document]) -> str:
    return format_contexts([d.page_content for d in docs])


class LangChainApp:
    def __init__(self) -> None:
        store = InMemoryVectorStore(embedding=CorpusEmbeddings())
        store.add_documents(
            [Document(id=d.doc_id, page_content=d.text, metadata={"source": d.doc_id}) for d in DOCS],
            ids=[d.doc_id for d in DOCS],
        )
        self.retriever = store.as_retriever(search_kwargs={"k": TOP_K})
        # Questions always run in corpus order, so the list's order matches them.
        self.model = FakeListChatModel(responses=[q.answer for q in QUESTIONS])
        self.chain: Runnable[str, str] = (
            {"context": self.retriever | _format_docs, "question": RunnablePassthrough()}
            | PROMPT
            | self.model
            | StrOutputParser()
        )

    def run_direct(self, question: str) -> RunResult:
        collector = _RetrievedDocs()
        answer = self.chain.invoke(question, config={"callbacks": [collector]})
        return _result(question, collector.documents, answer)

    def run_sequential(self, question: str) -> RunResult:
        docs = self.retriever.invoke(question)
        messages = PROMPT.invoke({"context": _format_docs(docs), "question": question})
        reply = self.model.invoke(messages)
        return _result(question, docs, str(reply.content))


def _result(question: str, docs: list[Document], answer: str) -> RunResult:
    return RunResult(
        query=question,
        contexts=[d.page_content for d in docs],
        context_ids=[str(d.id) for d in docs],
        answer=answer,
    )


def build_app() -> LangChainApp:
    return LangChainApp()
