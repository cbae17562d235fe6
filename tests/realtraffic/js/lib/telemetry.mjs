/**
 * The app's OpenTelemetry setup, as a Node.js service does it: a NodeTracerProvider registered
 * globally (AsyncLocalStorage context), the real OTLP/HTTP exporters (protobuf or JSON) behind a
 * batch processor for each endpoint, and the real HTTP server instrumentation. Each exporter is
 * tallied so a run fails loudly when its spans never reached an endpoint.
 */
import { createRequire } from 'node:module';

import { OTLPTraceExporter as ProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';

export const PROTOCOLS = { protobuf: ProtoExporter, json: JsonExporter };

/** Counts what an exporter delivered and what it failed to deliver. */
export class TalliedExporter {
  constructor(inner, endpoint) {
    this.inner = inner;
    this.endpoint = endpoint;
    this.exported = 0;
    this.failed = 0;
  }

  export(spans, done) {
    this.inner.export(spans, (result) => {
      if (result.code === 0) this.exported += spans.length; else this.failed += spans.length;
      done(result);
    });
  }

  shutdown() { return this.inner.shutdown(); }

  forceFlush() { return this.inner.forceFlush ? this.inner.forceFlush() : Promise.resolve(); }
}

export function makeExporter(protocol, endpoint) {
  const Exporter = PROTOCOLS[protocol];
  if (!Exporter) throw new Error(`unknown protocol ${protocol} (protobuf or json)`);
  return new TalliedExporter(new Exporter({ url: endpoint }), endpoint);
}

/**
 * Registers the global tracer provider and the HTTP instrumentation; returns the provider, its
 * tallied exporters and the `node:http` module to build servers with (loaded after the
 * instrumentation, so its server spans are made).
 */
export function setUpTelemetry({ serviceName, endpoints, protocol }) {
  const exporters = endpoints.map((e) => makeExporter(protocol, e));
  // doc: js-otlp-setup
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': serviceName }),
    spanProcessors: exporters.map((e) => new BatchSpanProcessor(e, { scheduledDelayMillis: 100 })),
  });
  provider.register();
  // end doc
  registerInstrumentations({ tracerProvider: provider, instrumentations: [new HttpInstrumentation()] });
  // ESM imports of node builtins are not hooked; a require after registering is.
  const http = createRequire(import.meta.url)('node:http');
  return { provider, exporters, http };
}

/**
 * Failures to report: spans that failed to export, and (`requireSpans`) an endpoint that got
 * none. Apps whose framework exports through its own exporter (Mastra) may leave this provider
 * empty when called outside a server.
 */
export function exportProblems(exporters, { requireSpans }) {
  return exporters
    .filter((e) => e.failed || (requireSpans && !e.exported))
    .map((e) => `span export to ${e.endpoint}: ${e.exported} exported, ${e.failed} failed`);
}
