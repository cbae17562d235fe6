/**
 * Offline models for the apps: the AI SDK's own mock language and embedding models (`ai/test`),
 * scripted from the prompt they are sent, so every framework drives them exactly as it drives a
 * provider's model (generate and stream, tool calls, usage) and nothing leaves the machine.
 */

const USAGE = {
  inputTokens: { total: 40, noCache: 40, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 20, text: 20, reasoning: 0 },
};

/** Every text the model was sent, tool results included, as one string. */
export function promptText(prompt) {
  const parts = [];
  for (const message of prompt) {
    if (typeof message.content === 'string') { parts.push(message.content); continue; }
    for (const part of message.content) {
      if (part.type === 'text') parts.push(part.text);
      else if (part.type === 'tool-result') parts.push(JSON.stringify(part.output));
    }
  }
  return parts.join('\n');
}

export function hasToolResult(prompt) {
  return prompt.some((m) => m.role === 'tool');
}

/**
 * A language model whose reply is `script(prompt)`: `{text}` or `{toolCall: {toolName, input}}`.
 * `MockModel` is MockLanguageModelV3 (AI SDK 6) or MockLanguageModelV4 (AI SDK 7).
 */
export function scriptedModel(MockModel, script, { modelId = 'mock-rag-model', provider = 'mock' } = {}) {
  let calls = 0;
  const reply = (options) => {
    calls += 1;
    const out = script(options.prompt);
    if (out.toolCall) {
      return {
        content: [{ type: 'tool-call', toolCallId: `call-${calls}`, toolName: out.toolCall.toolName,
                    input: JSON.stringify(out.toolCall.input) }],
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
      };
    }
    return { content: [{ type: 'text', text: out.text }], finishReason: { unified: 'stop', raw: 'stop' } };
  };
  return new MockModel({
    provider,
    modelId,
    doGenerate: async (options) => {
      const { content, finishReason } = reply(options);
      return { content, finishReason, usage: USAGE, warnings: [],
               response: { id: `resp-${calls}`, modelId, timestamp: new Date() } };
    },
    doStream: async (options) => {
      const { content, finishReason } = reply(options);
      const parts = [{ type: 'stream-start', warnings: [] },
                     { type: 'response-metadata', id: `resp-${calls}`, modelId, timestamp: new Date() }];
      for (const item of content) {
        if (item.type === 'text') {
          // Streamed in a few chunks, as a provider does; the answer is their concatenation.
          const words = item.text.split(/(?<= )/);
          parts.push({ type: 'text-start', id: 't0' });
          for (const w of words) parts.push({ type: 'text-delta', id: 't0', delta: w });
          parts.push({ type: 'text-end', id: 't0' });
        } else {
          parts.push(item);
        }
      }
      parts.push({ type: 'finish', finishReason, usage: USAGE });
      return { stream: new ReadableStream({ start(c) { for (const p of parts) c.enqueue(p); c.close(); } }) };
    },
  });
}

/** An embedding model over the corpus' fake embedding (`embedFn(text) -> number[]`). */
export function corpusEmbedder(MockEmbeddingModel, embedFn, { modelId = 'mock-embedding' } = {}) {
  return new MockEmbeddingModel({
    provider: 'mock',
    modelId,
    maxEmbeddingsPerCall: 100,
    doEmbed: async ({ values }) => ({ embeddings: values.map(embedFn), usage: { tokens: values.length * 8 },
                                      warnings: [] }),
  });
}
