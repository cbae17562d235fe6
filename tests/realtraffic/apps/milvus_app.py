"""A LangChain RAG app over a Milvus Lite server (`langchain-milvus`), traced by OpenLLMetry's
LangChain and Milvus instrumentors with content capture off (`TRACELOOP_TRACE_CONTENT=false`, as
the test runs it): the retriever span then records neither the question nor the documents, and
the model span no messages; what is left of the documents is the Milvus search span's
`db.search.result` events, their ids and distances in rank order. The app records the user's
question on its own request span (`handle_question`, `app.question`), as an app that keeps
prompts out of its traces may still do.

    TRACELOOP_TRACE_CONTENT=false python -m tests.realtraffic.apps.milvus_app \
        --milvus-uri http://127.0.0.1:19530 --endpoint http://127.0.0.1:4318/v1/traces \
        --service-name kb-app --out result.json

At start the app loads the corpus into the collection `--collection` (ids kept as its primary
keys, text in the field `text`), as an app builds its index; each question then runs retriever
and model one after the other under its request span. `--out` gets runner.py's report.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_milvus import Milvus
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from opentelemetry.instrumentation.milvus import MilvusInstrumentor

from .corpus import DOCS, QUESTIONS, TOP_K, RunResult
from .langchain_app import PROMPT, CorpusEmbeddings, _format_docs
from .runner import finish, make_provider


def build_store(uri: str, collection: str) -> Milvus:
    return Milvus.from_documents(
        [Document(page_content=d.text, metadata={"source": d.doc_id}) for d in DOCS], CorpusEmbeddings(),
        ids=[d.doc_id for d in DOCS], collection_name=collection, connection_args={"uri": uri},
        auto_id=False, primary_field="id", text_field="text", drop_old=True,
        index_params={"index_type": "FLAT", "metric_type": "IP"}, consistency_level="Strong")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--milvus-uri", required=True)
    parser.add_argument("--collection", default="kb_docs")
    parser.add_argument("--endpoint", required=True, action="append", help="OTLP/HTTP traces URL (repeatable)")
    parser.add_argument("--service-name", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    provider, tallies = make_provider(args.service_name, None, args.endpoint)
    LangchainInstrumentor().instrument(tracer_provider=provider)
    MilvusInstrumentor().instrument(tracer_provider=provider)
    retriever = build_store(args.milvus_uri, args.collection).as_retriever(search_kwargs={"k": TOP_K})
    model = FakeListChatModel(responses=[q.answer for q in QUESTIONS])
    tracer = provider.get_tracer("ctxprec.realtraffic.app")
    runs = []
    for q in QUESTIONS:
        with tracer.start_as_current_span("handle_question") as span:
            span.set_attribute("app.question", q.text)
            docs = retriever.invoke(q.text)
            reply = model.invoke(PROMPT.invoke({"context": _format_docs(docs), "question": q.text}))
        runs.append(RunResult(query=q.text, contexts=[d.page_content for d in docs],
                              context_ids=[str(d.metadata.get("id", d.id)) for d in docs], answer=str(reply.content)))
    return finish(provider, tallies, args.endpoint, args.out, "langchain-milvus", "openllmetry", "sequential", runs)


if __name__ == "__main__":
    sys.exit(main())
