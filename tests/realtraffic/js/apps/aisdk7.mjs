/**
 * Vercel AI SDK 7 apps traced through @ai-sdk/otel, one per integration, registered globally as
 * its docs show (`registerTelemetry`): `aisdk7-otel` (`OpenTelemetry`: GenAI spans, `chat
 * <model>` with `gen_ai.output.messages`) and `aisdk7-legacy` (`LegacyOpenTelemetry`: the
 * `ai.*` spans of AI SDK 6). Each answers with generateText from the documents of a retrieval
 * span the app writes itself (lib/retrieval.mjs); the model is MockLanguageModelV4.
 */
import { LegacyOpenTelemetry, OpenTelemetry } from '@ai-sdk/otel';
import { generateText, registerTelemetry } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';

import { cannedAnswer } from '../lib/corpus.mjs';
import { promptText, scriptedModel } from '../lib/models.mjs';
import { installedVersion } from '../lib/packages.mjs';
import { SYSTEM, retrieve, underAppSpan, userPrompt } from '../lib/retrieval.mjs';

export const APPS = ['aisdk7-otel', 'aisdk7-legacy'];
// doc: aisdk7-integrations
// OpenTelemetry: GenAI spans; LegacyOpenTelemetry: AI SDK 6's `ai.*` spans.
const INTEGRATIONS = { 'aisdk7-otel': () => new OpenTelemetry(), 'aisdk7-legacy': () => new LegacyOpenTelemetry() };
// end doc

export async function build(app, { corpus, retrieval }) {
  const integration = INTEGRATIONS[app];
  if (!integration) throw new Error(`unknown AI SDK 7 app ${app}: ${APPS.join(', ')}`);
  // doc: aisdk7-register
  registerTelemetry(integration());
  // end doc
  const model = scriptedModel(MockLanguageModelV4, (prompt) => ({ text: cannedAnswer(corpus, promptText(prompt)) }));
  return {
    usesGlobalProvider: true,
    versions: { ai: installedVersion('ai'), '@ai-sdk/otel': installedVersion('@ai-sdk/otel') },
    async ask(question, { shape }) {
      return underAppSpan(shape, 'answer_question', async () => {
        const docs = await retrieve(corpus, retrieval, question);
        const { text } = await generateText({ model, system: SYSTEM, prompt: userPrompt(question, docs),
                                              telemetry: { functionId: 'kestrel-answer' } });
        return { query: question, contexts: docs.map((d) => d.text), context_ids: docs.map((d) => d.id),
                 answer: text };
      });
    },
    async close() {},
  };
}
