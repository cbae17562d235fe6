/**
 * The Mastra packages the Mastra apps use, resolved from this folder's node_modules (Mastra
 * 1.71). mastra-1.70/mastra-modules.mjs is the same list resolved from that folder (Mastra 1.70):
 * the apps take their modules from one of them, so every Mastra package of a run finds the same
 * @mastra/core, as an app installed with that version does.
 */
import { readFileSync } from 'node:fs';

export { Agent } from '@mastra/core/agent';
export { Mastra } from '@mastra/core/mastra';
export { createTool } from '@mastra/core/tools';
export { createStep, createWorkflow } from '@mastra/core/workflows';
export { LibSQLVector } from '@mastra/libsql';
export { Observability } from '@mastra/observability';
export { OtelExporter } from '@mastra/otel-exporter';
export { createGraphRAGTool, createVectorQueryTool } from '@mastra/rag';
export { z } from 'zod';

export const version = JSON.parse(
  readFileSync(new URL('./node_modules/@mastra/core/package.json', import.meta.url), 'utf8')).version;
