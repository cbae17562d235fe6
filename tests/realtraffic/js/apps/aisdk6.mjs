/**
 * Vercel AI SDK 6 apps with its built-in telemetry (`experimental_telemetry`: the `ai.*` spans
 * on the global tracer provider): `aisdk6-generate-text`, `aisdk6-stream-text` and
 * `aisdk6-generate-object` answer from the documents of a retrieval span the app writes itself
 * (lib/retrieval.mjs). The model is the AI SDK's MockLanguageModelV3, answering with the corpus'
 * canned answer (as `{"answer": ...}` JSON for generateObject).
 */
import { generateObject, generateText, streamText } from 'ai-v6';
import { MockLanguageModelV3 } from 'ai-v6/test';
import { z } from 'zod';

import { cannedAnswer } from '../lib/corpus.mjs';
import { promptText, scriptedModel } from '../lib/models.mjs';
import { installedVersion } from '../lib/packages.mjs';
import { SYSTEM, retrieve, underAppSpan, userPrompt } from '../lib/retrieval.mjs';

export const APPS = ['aisdk6-generate-text', 'aisdk6-stream-text', 'aisdk6-generate-object'];
// doc: aisdk6
// Passed as `experimental_telemetry` to generateText, streamText and generateObject.
const TELEMETRY = { isEnabled: true, functionId: 'kestrel-answer' };
// end doc

const CALLS = {
  'aisdk6-generate-text': async (model, prompt) => (await generateText({ model, ...prompt,
                                                                            experimental_telemetry: TELEMETRY })).text,
  'aisdk6-stream-text': async (model, prompt) => {
    const result = streamText({ model, ...prompt, experimental_telemetry: TELEMETRY });
    let text = '';
    for await (const delta of result.textStream) text += delta;
    return text;
  },
  'aisdk6-generate-object': async (model, prompt) => {
    const result = await generateObject({ model, ...prompt, schema: z.object({ answer: z.string() }),
                                          experimental_telemetry: TELEMETRY });
    return JSON.stringify(result.object);
  },
};

export async function build(app, { corpus, retrieval }) {
  const call = CALLS[app];
  if (!call) throw new Error(`unknown AI SDK 6 app ${app}: ${APPS.join(', ')}`);
  const asObject = app === 'aisdk6-generate-object';
  const model = scriptedModel(MockLanguageModelV3, (prompt) => {
    const answer = cannedAnswer(corpus, promptText(prompt));
    return { text: asObject ? JSON.stringify({ answer }) : answer };
  });
  return {
    usesGlobalProvider: true,
    versions: { ai: installedVersion('ai-v6') },
    async ask(question, { shape }) {
      return underAppSpan(shape, 'answer_question', async () => {
        const docs = await retrieve(corpus, retrieval, question);
        const answer = await call(model, { system: SYSTEM, prompt: userPrompt(question, docs) });
        return { query: question, contexts: docs.map((d) => d.text), context_ids: docs.map((d) => d.id), answer };
      });
    },
    async close() {},
  };
}
