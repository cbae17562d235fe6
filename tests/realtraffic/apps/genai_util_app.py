"""A RAG app traced with the OpenTelemetry GenAI utility (`opentelemetry-util-genai`, the library
the GenAI SIG's instrumentations write their spans with), content capture in SPAN_ONLY mode: each
question's retrieval span carries the question and its documents as `{id, score}` (the utility's
RetrievalDocument has no text field), the inference span after it the model's messages.

    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY \
    python -m tests.realtraffic.apps.genai_util_app --endpoint http://127.0.0.1:4318/v1/traces \
        --service-name kb-app --out result.json

The app searches the corpus itself (cosine similarity over `embed_text`, top 3), so each
question retrieves `Question.retrieved_ids`, and a canned model answers. `--out` gets the same
report as runner.py's.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.trace import Tracer
from opentelemetry.util.genai.handler import TelemetryHandler
from opentelemetry.util.genai.types import InputMessage, OutputMessage, RetrievalDocument, Text

from .corpus import DOCS, QUESTIONS, TOP_K, Doc, RunResult, canned_answer_for, embed_text, format_contexts
from .runner import finish, make_provider

DATA_SOURCE = "kb"


def search(question: str) -> list[tuple[Doc, float]]:
    query = embed_text(question)

    def cosine(doc: Doc) -> float:
        vector = embed_text(doc.text)
        dot = sum(a * b for a, b in zip(query, vector))
        return dot / (math.sqrt(sum(a * a for a in query)) * math.sqrt(sum(b * b for b in vector)))

    ranked = sorted(((doc, cosine(doc)) for doc in DOCS), key=lambda pair: -pair[1])
    return ranked[:TOP_K]


def ask(handler: TelemetryHandler, tracer: Tracer, question: str) -> RunResult:
    # One request, one trace: the app's own span holds the retrieval and the model call after it.
    with tracer.start_as_current_span("handle_question"):
        with handler.retrieval(data_source_id=DATA_SOURCE, provider="in-memory") as retrieval:
            retrieval.query_text = question
            retrieval.top_k = TOP_K
            hits = search(question)
            retrieval.documents = [RetrievalDocument(id=doc.doc_id, score=round(score, 4)) for doc, score in hits]
        texts = [doc.text for doc, _ in hits]
        with handler.inference("canned", request_model="canned-rag") as inference:
            prompt = f"Answer the question using only the context below.\n\nContext:\n{format_contexts(texts)}"
            inference.input_messages = [InputMessage("system", [Text(prompt)]), InputMessage("user", [Text(question)])]
            answer = canned_answer_for(question)
            inference.output_messages = [OutputMessage("assistant", [Text(answer)], finish_reason="stop")]
    return RunResult(query=question, contexts=texts, context_ids=[doc.doc_id for doc, _ in hits], answer=answer)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--endpoint", required=True, action="append", help="OTLP/HTTP traces URL (repeatable)")
    parser.add_argument("--service-name", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    provider, tallies = make_provider(args.service_name, None, args.endpoint)
    handler = TelemetryHandler(tracer_provider=provider)
    tracer = provider.get_tracer("ctxprec.realtraffic.app")
    runs = [ask(handler, tracer, q.text) for q in QUESTIONS]
    return finish(provider, tallies, args.endpoint, args.out, "genai-util", "genai", "direct", runs)


if __name__ == "__main__":
    sys.exit(main())
