/**
 * The Mastra packages of the Mastra apps, resolved from this folder's node_modules (Mastra 1.70,
 * the minor version before the current one); see ../mastra-modules.mjs.
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
