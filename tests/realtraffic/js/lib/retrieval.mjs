/**
 * The retrieval span an app writes itself with OpenTelemetry's API, as apps without a framework
 * retriever do, in one of the conventions a backend reads:
 *
 * - `openinference`: `openinference.span.kind=RETRIEVER`, the query in `input.value`, documents
 *   flattened to `retrieval.documents.{i}.document.{id,content,score}`;
 * - `genai`: the OpenTelemetry GenAI retrieval span (`gen_ai.operation.name=retrieval`,
 *   `gen_ai.retrieval.query.text`, `gen_ai.retrieval.documents` as a JSON string: the JS API has
 *   no structured attribute values) with `id`, `score` and `content`;
 * - `genai-ids`: the same with only `id` and `score`, as the conventions record documents when
 *   content capture is off.
 */
import { SpanKind, trace } from '@opentelemetry/api';

import { search } from './corpus.mjs';

export const FLAVOURS = ['openinference', 'genai', 'genai-ids'];

function attributes(flavour, query, docs) {
  if (flavour === 'openinference') {
    const out = { 'openinference.span.kind': 'RETRIEVER', 'input.value': query };
    docs.forEach((d, i) => {
      out[`retrieval.documents.${i}.document.id`] = d.id;
      out[`retrieval.documents.${i}.document.content`] = d.text;
      out[`retrieval.documents.${i}.document.score`] = d.score;
    });
    return out;
  }
  const documents = docs.map((d) => (flavour === 'genai' ? { id: d.id, score: d.score, content: d.text }
                                                          : { id: d.id, score: d.score }));
  return {
    'gen_ai.operation.name': 'retrieval',
    'gen_ai.data_source.id': 'kestrel-manual',
    'gen_ai.retrieval.query.text': query,
    'gen_ai.retrieval.documents': JSON.stringify(documents),
  };
}

/** Searches the corpus inside a retrieval span of the given flavour; returns the documents. */
export async function retrieve(corpus, flavour, query) {
  if (!FLAVOURS.includes(flavour)) throw new Error(`unknown retrieval flavour ${flavour}: ${FLAVOURS.join(', ')}`);
  const tracer = trace.getTracer('kestrel-rag-app');
  const name = flavour === 'openinference' ? 'retrieve' : 'retrieval kestrel-manual';
  return tracer.startActiveSpan(name, { kind: SpanKind.INTERNAL }, async (span) => {
    try {
      const docs = search(corpus, query);
      span.setAttributes(attributes(flavour, query, docs));
      return docs;
    } finally {
      span.end();
    }
  });
}

/** Runs `fn` inside the app's own root span (`direct`) or in the current one (`http`). */
export async function underAppSpan(shape, name, fn) {
  if (shape !== 'direct') return fn();
  const tracer = trace.getTracer('kestrel-rag-app');
  return tracer.startActiveSpan(name, async (span) => {
    try {
      return await fn();
    } finally {
      span.end();
    }
  });
}

export const SYSTEM = 'Answer the question using only the context below.';

export function userPrompt(question, docs) {
  return `Context:\n${docs.map((d) => d.text).join('\n\n')}\n\nQuestion: ${question}`;
}
