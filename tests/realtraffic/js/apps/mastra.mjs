/**
 * Mastra RAG apps, traced by @mastra/observability and exported by @mastra/otel-exporter over
 * OTLP/HTTP (the `custom` provider, protobuf or JSON), as the Mastra docs set them up:
 *
 * - `mastra-vector`: an Agent with `createVectorQueryTool` over a LibSQL vector store in memory;
 * - `mastra-graph`: the same with `createGraphRAGTool`;
 * - `mastra-tool`: an Agent with a plain `createTool` that searches the store and returns
 *   `{documents: [{id, text, score}]}`, a shape the app chose;
 * - `mastra-workflow`: a workflow, a `retrieve` step then a `generate` step whose agent answers
 *   from the documents.
 *
 * The agents' model is the AI SDK's MockLanguageModelV3: it calls the tool with the question,
 * then answers with the corpus' canned answer once the tool result is in its prompt. Inside an
 * HTTP server span, the run continues that trace through `tracingOptions` (traceId and
 * parentSpanId of the active span), Mastra's way to join an existing trace.
 */
import { trace } from '@opentelemetry/api';
import { MockEmbeddingModelV3, MockLanguageModelV3 } from 'ai-v6/test';

import { cannedAnswer, embed, search } from '../lib/corpus.mjs';
import { corpusEmbedder, hasToolResult, promptText, scriptedModel } from '../lib/models.mjs';

export const APPS = ['mastra-vector', 'mastra-graph', 'mastra-tool', 'mastra-workflow'];
const INDEX = 'kestrel_manual';
const TOOL_ID = { 'mastra-vector': 'searchDocs', 'mastra-graph': 'searchGraph', 'mastra-tool': 'lookupManual' };

const MASTRA_PROTOCOL = { protobuf: 'http/protobuf', json: 'http/json' };

/** The Mastra modules of one installed version: ../mastra-modules.mjs or ../mastra-1.70/... */
export async function loadMastra(version) {
  const path = version === '1.70' ? '../mastra-1.70/mastra-modules.mjs' : '../mastra-modules.mjs';
  return import(new URL(path, import.meta.url).href);
}

function observability(m, { serviceName, endpoints, protocol }) {
  // doc: mastra
  // m: the exports of @mastra/observability (Observability) and @mastra/otel-exporter (OtelExporter).
  return new m.Observability({
    configs: {
      otel: {
        serviceName,
        exporters: endpoints.map((endpoint) => new m.OtelExporter({
          provider: { custom: { endpoint, protocol: MASTRA_PROTOCOL[protocol] } },
          signals: { logs: false },
        })),
      },
    },
  });
  // end doc
}

async function vectorStore(m, corpus) {
  const store = new m.LibSQLVector({ id: 'kb', url: 'file::memory:' });
  await store.createIndex({ indexName: INDEX, dimension: corpus.dimension });
  await store.upsert({
    indexName: INDEX,
    vectors: corpus.docs.map((d) => embed(corpus, d.text)),
    metadata: corpus.docs.map((d) => ({ text: d.text, doc_id: d.id })),
    ids: corpus.docs.map((d) => d.id),
  });
  return store;
}

/** The agent's model: the tool call first, the canned answer once the tool result is back. */
function agentModel(corpus, toolName, toolInput) {
  return scriptedModel(MockLanguageModelV3, (prompt) => {
    const text = promptText(prompt);
    if (hasToolResult(prompt)) return { text: cannedAnswer(corpus, text) };
    const question = corpus.questions.find((q) => text.includes(q.text));
    return { toolCall: { toolName, input: toolInput(question ? question.text : text) } };
  });
}

/** What one run returned, read from the agent's own result: the tool output and the text. */
function agentRun(question, result, toolName, toContexts) {
  const toolResults = result.steps.flatMap((s) => s.toolResults ?? []);
  const found = toolResults.map((r) => r.payload ?? r).find((r) => r.toolName === toolName);
  if (!found) throw new Error(`the agent did not call ${toolName}: ${JSON.stringify(result.steps.length)} steps`);
  const { contexts, ids } = toContexts(found.result);
  return { query: question, contexts, context_ids: ids, answer: result.text };
}

function activeTrace() {
  const span = trace.getActiveSpan();
  if (!span) return undefined;
  const { traceId, spanId } = span.spanContext();
  return { traceId, parentSpanId: spanId };
}

export async function build(app, { corpus, serviceName, endpoints, protocol, mastraVersion }) {
  const m = await loadMastra(mastraVersion);
  const embedder = corpusEmbedder(MockEmbeddingModelV3, (t) => embed(corpus, t));
  const store = await vectorStore(m, corpus);
  const obs = () => observability(m, { serviceName, endpoints, protocol });
  const toolInput = (q) => ({ queryText: q, topK: corpus.topK });
  const byText = new Map(corpus.docs.map((d) => [d.text, d.id]));

  if (app === 'mastra-workflow') return buildWorkflow(m, corpus, store, embedder, obs());

  const makeTool = {
    'mastra-vector': () => m.createVectorQueryTool({ id: TOOL_ID[app], vectorStore: store, indexName: INDEX,
                                                     model: embedder }),
    'mastra-graph': () => m.createGraphRAGTool({ id: TOOL_ID[app], vectorStore: store, indexName: INDEX,
                                                  model: embedder, graphOptions: { dimension: corpus.dimension } }),
    'mastra-tool': () => m.createTool({
      id: TOOL_ID[app],
      description: 'Looks up passages of the Kestrel K2 manual that answer a question',
      inputSchema: m.z.object({ question: m.z.string() }),
      outputSchema: m.z.object({ documents: m.z.array(m.z.object({ id: m.z.string(), text: m.z.string(),
                                                                   score: m.z.number() })) }),
      execute: async ({ question }) => {
        const hits = await store.query({ indexName: INDEX, queryVector: embed(corpus, question), topK: corpus.topK });
        return { documents: hits.map((h) => ({ id: h.id, text: h.metadata.text, score: h.score })) };
      },
    }),
  }[app];
  if (!makeTool) throw new Error(`unknown Mastra app ${app}`);
  const input = app === 'mastra-tool' ? (q) => ({ question: q }) : toolInput;
  const toContexts = app === 'mastra-tool'
    ? (out) => ({ contexts: out.documents.map((d) => d.text), ids: out.documents.map((d) => d.id) })
    : app === 'mastra-vector'
      ? (out) => ({ contexts: out.relevantContext.map((c) => c.text), ids: out.relevantContext.map((c) => c.doc_id) })
      : (out) => ({ contexts: out.relevantContext, ids: out.relevantContext.map((t) => byText.get(t)) });

  // A GraphRAG tool builds its graph from the results of its first query and keeps it, so the
  // graph agent resolves its tools per call (a dynamic `tools`): each question gets a fresh one.
  const tools = app === 'mastra-graph' ? () => ({ [TOOL_ID[app]]: makeTool() }) : { [TOOL_ID[app]]: makeTool() };
  const agent = new m.Agent({
    id: 'rag-agent',
    name: 'Kestrel support agent',
    instructions: 'Answer questions about the Kestrel K2 e-bike using only the manual passages the tool returns.',
    model: agentModel(corpus, TOOL_ID[app], input),
    tools,
  });
  const mastra = new m.Mastra({ agents: { ragAgent: agent }, observability: obs(), logger: false });
  return {
    versions: { '@mastra/core': m.version },
    async ask(question) {
      const result = await mastra.getAgent('ragAgent').generate(
        question, { maxSteps: 3, tracingOptions: activeTrace() });
      return agentRun(question, result, TOOL_ID[app], toContexts);
    },
    async close() { await mastra.shutdown(); },
  };
}

function buildWorkflow(m, corpus, store, embedder, obs) {
  const z = m.z;
  const documents = z.array(z.object({ id: z.string(), text: z.string(), score: z.number() }));
  const retrieve = m.createStep({
    id: 'retrieve',
    inputSchema: z.object({ question: z.string() }),
    outputSchema: z.object({ question: z.string(), documents }),
    execute: async ({ inputData }) => {
      const [vector] = (await embedder.doEmbed({ values: [inputData.question] })).embeddings;
      const hits = await store.query({ indexName: INDEX, queryVector: vector, topK: corpus.topK });
      return { question: inputData.question,
               documents: hits.map((h) => ({ id: h.id, text: h.metadata.text, score: h.score })) };
    },
  });
  const generate = m.createStep({
    id: 'generate',
    inputSchema: z.object({ question: z.string(), documents }),
    outputSchema: z.object({ answer: z.string(), documents }),
    execute: async ({ inputData, mastra, tracingContext }) => {
      const context = inputData.documents.map((d) => d.text).join('\n\n');
      const result = await mastra.getAgent('writer').generate(
        `Context:\n${context}\n\nQuestion: ${inputData.question}`, { tracingContext });
      return { answer: result.text, documents: inputData.documents };
    },
  });
  const workflow = m.createWorkflow({
    id: 'kestrel-rag',
    inputSchema: z.object({ question: z.string() }),
    outputSchema: z.object({ answer: z.string(), documents }),
  }).then(retrieve).then(generate).commit();
  const writer = new m.Agent({
    id: 'writer',
    name: 'Kestrel answer writer',
    instructions: 'Answer the question using only the context given.',
    model: scriptedModel(MockLanguageModelV3, (prompt) => ({ text: cannedAnswer(corpus, promptText(prompt)) })),
  });
  const mastra = new m.Mastra({ agents: { writer }, workflows: { kestrelRag: workflow }, observability: obs,
                                logger: false });
  return {
    versions: { '@mastra/core': m.version },
    async ask(question) {
      const run = await mastra.getWorkflow('kestrelRag').createRun();
      const result = await run.start({ inputData: { question }, tracingOptions: activeTrace() });
      if (result.status !== 'success') throw new Error(`workflow ${result.status}: ${JSON.stringify(result.error)}`);
      const docs = result.result.documents;
      return { query: question, contexts: docs.map((d) => d.text), context_ids: docs.map((d) => d.id),
               answer: result.result.answer };
    },
    async close() { await mastra.shutdown(); },
  };
}
