/**
 * A LangChain.js RAG chain instrumented by OpenInference
 * (@arizeai/openinference-instrumentation-langchain, patching @langchain/core's callback manager
 * as its docs show for ESM): an in-memory vector store retriever (@langchain/core's
 * FakeVectorStore over the corpus' fake embedding), a prompt, FakeListChatModel and a string
 * parser, the shape of tests/realtraffic/apps/langchain_app.py.
 */
import { LangChainInstrumentation } from '@arizeai/openinference-instrumentation-langchain';
import { BaseCallbackHandler } from '@langchain/core/callbacks/base';
import * as CallbackManagerModule from '@langchain/core/callbacks/manager';
import { Document } from '@langchain/core/documents';
import { Embeddings } from '@langchain/core/embeddings';
import { StringOutputParser } from '@langchain/core/output_parsers';
import { ChatPromptTemplate } from '@langchain/core/prompts';
import { RunnablePassthrough, RunnableSequence } from '@langchain/core/runnables';
import { FakeListChatModel, FakeVectorStore } from '@langchain/core/utils/testing';

import { embed, formatContexts } from '../lib/corpus.mjs';
import { installedVersion } from '../lib/packages.mjs';

export const APPS = ['langchain-openinference'];

class CorpusEmbeddings extends Embeddings {
  constructor(corpus) {
    super({});
    this.corpus = corpus;
  }

  async embedDocuments(texts) { return texts.map((t) => embed(this.corpus, t)); }

  async embedQuery(text) { return embed(this.corpus, text); }
}

/** Records what the retriever returned, so the app reports it without reshaping the chain. */
class RetrievedDocs extends BaseCallbackHandler {
  name = 'retrieved-docs';

  // LangChain.js runs handlers in the background by default; the run's report needs them done.
  awaitHandlers = true;

  documents = [];

  handleRetrieverEnd(documents) { this.documents = documents; }
}

const PROMPT = ChatPromptTemplate.fromMessages([
  ['system', 'Answer the question using only the context below.\n\nContext:\n{context}'],
  ['human', '{question}'],
]);

export async function build(app, { corpus, tracerProvider }) {
  if (!APPS.includes(app)) throw new Error(`unknown LangChain.js app ${app}: ${APPS.join(', ')}`);
  // doc: langchainjs
  const instrumentation = new LangChainInstrumentation({ tracerProvider });
  instrumentation.manuallyInstrument(CallbackManagerModule);
  // end doc

  const store = new FakeVectorStore(new CorpusEmbeddings(corpus));
  await store.addDocuments(corpus.docs.map((d) => new Document({ id: d.id, pageContent: d.text,
                                                                  metadata: { source: d.id } })));
  const retriever = store.asRetriever({ k: corpus.topK });
  // Questions always run in corpus order, so the list's order matches them.
  const model = new FakeListChatModel({ responses: corpus.questions.map((q) => q.answer) });
  const chain = RunnableSequence.from([
    { context: retriever.pipe((docs) => formatContexts(docs.map((d) => d.pageContent))),
      question: new RunnablePassthrough() },
    PROMPT,
    model,
    new StringOutputParser(),
  ]);
  return {
    usesGlobalProvider: true,
    versions: { '@langchain/core': installedVersion('@langchain/core'),
                '@arizeai/openinference-instrumentation-langchain':
                  installedVersion('@arizeai/openinference-instrumentation-langchain') },
    async ask(question) {
      const collector = new RetrievedDocs();
      const answer = await chain.invoke(question, { callbacks: [collector] });
      return { query: question, contexts: collector.documents.map((d) => d.pageContent),
               context_ids: collector.documents.map((d) => d.metadata.source), answer };
    },
    async close() {},
  };
}
