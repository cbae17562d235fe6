/**
 * Runs one JavaScript RAG app over every question of the corpus and exports its spans with the
 * real OTLP/HTTP exporters; writes what the app retrieved and answered to --out, in the shape of
 * tests/realtraffic/apps/runner.py (`{"app", "shape", "runs": [{query, contexts, context_ids,
 * answer}]}`), so the Python tests compare ctxprec's findings with it.
 *
 *   node tests/realtraffic/js/runner.mjs --app mastra-vector --shape http \
 *     --endpoint http://127.0.0.1:4318/v1/traces --protocol protobuf \
 *     --service-name rag --corpus corpus.json --out result.json [--mastra 1.70] [--retrieval genai]
 *
 * Shapes: `direct` (the app called in the process) and `http` (the same call inside the handler
 * of a node:http server instrumented by @opentelemetry/instrumentation-http, driven by fetch).
 * The exit code is 1 when spans failed to export.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { loadCorpus } from './lib/corpus.mjs';
import { exportProblems, setUpTelemetry } from './lib/telemetry.mjs';

const FAMILIES = {
  mastra: () => import('./apps/mastra.mjs'),
  aisdk6: () => import('./apps/aisdk6.mjs'),
  aisdk7: () => import('./apps/aisdk7.mjs'),
  langchain: () => import('./apps/langchain.mjs'),
};
const SHAPES = ['direct', 'http'];

function family(app) {
  const name = app.split('-')[0];
  if (!(name in FAMILIES)) throw new Error(`unknown app ${app}: one of ${Object.keys(FAMILIES).join(', ')}-*`);
  return FAMILIES[name]();
}

async function serveAndAsk(http, app, questions) {
  const server = http.createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    try {
      const run = await app.ask(JSON.parse(body).question, { shape: 'http' });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(run));
    } catch (err) {
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(String(err?.stack ?? err));
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  try {
    const runs = [];
    for (const q of questions) {
      const response = await fetch(`http://127.0.0.1:${port}/ask`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ question: q.text }),
      });
      if (!response.ok) throw new Error(`POST /ask ${response.status}: ${await response.text()}`);
      runs.push(await response.json());
    }
    return runs;
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
}

async function main() {
  const { values } = parseArgs({
    options: {
      app: { type: 'string' },
      shape: { type: 'string', default: 'direct' },
      endpoint: { type: 'string', multiple: true },
      protocol: { type: 'string', default: 'protobuf' },
      'service-name': { type: 'string', default: 'js-rag-app' },
      corpus: { type: 'string' },
      out: { type: 'string' },
      mastra: { type: 'string', default: '1.71' },
      retrieval: { type: 'string', default: 'openinference' },
    },
  });
  for (const key of ['app', 'endpoint', 'corpus', 'out']) {
    if (!values[key]) throw new Error(`--${key} is required`);
  }
  if (!SHAPES.includes(values.shape)) throw new Error(`--shape must be one of ${SHAPES.join(', ')}`);
  const corpus = loadCorpus(values.corpus);
  const options = { corpus, serviceName: values['service-name'], endpoints: values.endpoint,
                    protocol: values.protocol, mastraVersion: values.mastra,
                    retrieval: values.retrieval };
  const telemetry = setUpTelemetry(options);
  const module = await family(values.app);
  const app = await module.build(values.app, { ...options, tracerProvider: telemetry.provider });
  let runs;
  try {
    runs = values.shape === 'direct'
      ? await corpus.questions.reduce(async (done, q) => [...await done, await app.ask(q.text, { shape: 'direct' })],
                                      Promise.resolve([]))
      : await serveAndAsk(telemetry.http, app, corpus.questions);
  } finally {
    await app.close();
    await telemetry.provider.forceFlush();
    await telemetry.provider.shutdown();
  }
  writeFileSync(values.out, JSON.stringify({ app: values.app, shape: values.shape, versions: app.versions ?? {},
                                             runs }, null, 2) + '\n');
  const problems = exportProblems(telemetry.exporters,
                                  { requireSpans: app.usesGlobalProvider || values.shape === 'http' });
  for (const p of problems) console.error(p);
  return problems.length ? 1 : 0;
}

main().then((code) => process.exit(code), (err) => { console.error(err?.stack ?? err); process.exit(2); });
