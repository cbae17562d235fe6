"""LlamaIndex RAG app: a VectorStoreIndex built from Documents through a SentenceSplitter, a fake embedding and a canned LLM.

The LLM is either CannedLLM or llama-index-llms-openai's real OpenAI class over a mock
transport (fake_openai.py); instrumentors treat the OpenAI class specially (OpenLLMetry
opens no span for it and defers to its separate OpenAI instrumentor).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from llama_index.core import Document, PromptTemplate, Settings, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.llms.llm import LLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.postprocessor import LLMRerank
from llama_index.core.schema import NodeWithScore
from opentelemetry.sdk.trace import TracerProvider

from .corpus import (
    DOCS,
    QUESTION_BY_TEXT,
    TOP_K,
    RunResult,
    canned_answer_for,
    embed_text,
    format_contexts,
)
from .fake_openai import FAKE_API_KEY, FAKE_BASE_URL, FAKE_MODEL, mock_transport

LLMKind = Literal["canned", "openai"]
RERANK_TOP_N = 2
_CHOICE_SELECT = "Respond with the numbers of the documents"
_LISTED_DOCUMENT = re.compile(r"Document (\d+):\n(.*?)(?:\n\n|$)", re.S)

# The same wording as LlamaIndex's default QA prompt, so the sequential shape sends the
# model what the query engine would.
QA_PROMPT = PromptTemplate(
    "Context information is below.\n"
    "---------------------\n"
    "{context_str}\n"
    "---------------------\n"
    "Given the context information and not prior knowledge, answer the query.\n"
    "Query: {query_str}\n"
    "Answer: "
)


class CorpusEmbedding(BaseEmbedding):
    """Deterministic vectors from the corpus; see corpus.embed_text."""

    def _get_query_embedding(self, query: str) -> list[float]:
        return embed_text(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return embed_text(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return embed_text(text)


def choice_select_answer(prompt: str) -> str:
    """LLMRerank's answer: the question's relevant documents first, the last retrieved first among
    them, so the re-ranked list is a new order as well as a subset of what was retrieved."""
    listed = prompt.split("Let's try this now:", 1)[-1]
    question = next((q for text, q in QUESTION_BY_TEXT.items() if text in listed), None)
    relevant = question.relevant_ids if question else frozenset()
    by_text = {d.text: d.doc_id for d in DOCS}
    numbered = [(int(n), by_text.get(text.strip(), "")) for n, text in _LISTED_DOCUMENT.findall(listed)]
    ranked = [n for n, doc_id in reversed(numbered) if doc_id in relevant]
    ranked += [n for n, doc_id in numbered if doc_id not in relevant]
    return "\n".join(f"Doc: {n}, Relevance: {10 - rank}" for rank, n in enumerate(ranked))


def _reply(prompt: str) -> str:
    return choice_select_answer(prompt) if _CHOICE_SELECT in prompt else canned_answer_for(prompt)


class CannedLLM(CustomLLM):
    """Answers with the corpus's canned answer for whichever question the prompt contains.

    It declares itself a chat model, as hosted LLMs do, so query engines call `chat` and
    instrumentors see chat events (OpenLLMetry records prompts only from chat events).
    """

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="canned-llm", context_window=4096, num_output=256, is_chat_model=True)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        prompt = "\n".join(m.content or "" for m in messages)
        reply = ChatMessage(role=MessageRole.ASSISTANT, content=_reply(prompt))
        return ChatResponse(message=reply)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=_reply(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        answer = canned_answer_for(prompt)
        yield CompletionResponse(text=answer, delta=answer)


def _whitespace_tokenizer(text: str) -> list[str]:
    return text.split()


def configure_offline(llm: LLM) -> None:
    # The default tokenizer is tiktoken, which may fetch its BPE file from the internet;
    # prompt packing only needs a rough count.
    Settings.tokenizer = _whitespace_tokenizer
    # Defaults would otherwise resolve to OpenAI models needing a key and the network.
    Settings.llm = llm
    Settings.embed_model = CorpusEmbedding()


def _make_llm(kind: LLMKind) -> LLM:
    if kind == "canned":
        return CannedLLM()
    import httpx
    from llama_index.llms.openai import OpenAI

    return OpenAI(
        model=FAKE_MODEL,
        api_key=FAKE_API_KEY,
        api_base=FAKE_BASE_URL,
        max_retries=0,
        http_client=httpx.Client(transport=mock_transport()),
    )


def instrument(instrumentor: str, provider: TracerProvider) -> None:
    if instrumentor == "openinference":
        # doc: llamaindex-openinference
        from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

        LlamaIndexInstrumentor().instrument(tracer_provider=provider)
        # end doc
    elif instrumentor == "openllmetry":
        # doc: llamaindex-openllmetry
        from opentelemetry.instrumentation.llamaindex import (
            LlamaIndexInstrumentor as TraceloopInstrumentor,
        )

        TraceloopInstrumentor().instrument(tracer_provider=provider)
        # end doc
    else:
        raise ValueError(f"no {instrumentor} instrumentor for llamaindex")


class LlamaIndexApp:
    def __init__(self, llm: LLMKind, rerank: bool = False) -> None:
        self.llm = _make_llm(llm)
        configure_offline(self.llm)
        # The index is built as apps build it, from Documents through a node parser, while
        # instrumented: the splitter's and the embedding's spans carry documents too, and are
        # not retrievals. Each corpus document is one chunk; its node keeps the corpus id.
        splitter = SentenceSplitter(chunk_size=512, chunk_overlap=0, id_func=lambda _, document: document.doc_id)
        documents = [Document(id_=d.doc_id, text=d.text) for d in DOCS]
        self.index = VectorStoreIndex.from_documents(documents, transformations=[splitter], embed_model=CorpusEmbedding())
        # With `rerank`, LLMRerank keeps the best RERANK_TOP_N of the TOP_K retrieved, re-ordered:
        # the model sees that list, not the retriever's.
        postprocessors = [LLMRerank(llm=self.llm, top_n=RERANK_TOP_N)] if rerank else []
        self.query_engine = self.index.as_query_engine(llm=self.llm, similarity_top_k=TOP_K,
                                                       node_postprocessors=postprocessors)
        self.retriever = self.index.as_retriever(similarity_top_k=TOP_K)

    def run_direct(self, question: str) -> RunResult:
        response = self.query_engine.query(question)
        return _result(question, list(response.source_nodes), str(response))

    def run_sequential(self, question: str) -> RunResult:
        nodes = self.retriever.retrieve(question)
        context = format_contexts([n.node.get_content() for n in nodes])
        messages = QA_PROMPT.format_messages(context_str=context, query_str=question)
        reply = self.llm.chat(messages)
        return _result(question, nodes, reply.message.content or "")


def _result(question: str, nodes: list[NodeWithScore], answer: str) -> RunResult:
    return RunResult(
        query=question,
        contexts=[n.node.get_content() for n in nodes],
        context_ids=[n.node.node_id for n in nodes],
        answer=answer,
    )


def build_app(llm: LLMKind = "canned", rerank: bool = False) -> LlamaIndexApp:
    return LlamaIndexApp(llm, rerank)
