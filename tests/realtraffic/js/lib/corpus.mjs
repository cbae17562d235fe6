/**
 * The shared test corpus, as the Python side hands it over (tests/helpers/js_apps.py writes it
 * from tests/realtraffic/apps/corpus.py): documents, questions with their canned answers, and
 * the fake embedding of every known text, so every app here retrieves exactly what the Python
 * apps retrieve without a second copy of the ranking rule.
 */
import { readFileSync } from 'node:fs';

/**
 * @typedef {{id: string, text: string}} Doc
 * @typedef {{text: string, answer: string}} Question
 * @typedef {{docs: Doc[], questions: Question[], topK: number, dimension: number,
 *            embeddings: Record<string, number[]>}} Corpus
 */

/** @returns {Corpus} */
export function loadCorpus(path) {
  const raw = JSON.parse(readFileSync(path, 'utf8'));
  for (const key of ['docs', 'questions', 'top_k', 'dimension', 'embeddings']) {
    if (!(key in raw)) throw new Error(`corpus ${path}: missing "${key}"`);
  }
  return { docs: raw.docs, questions: raw.questions, topK: raw.top_k, dimension: raw.dimension,
           embeddings: raw.embeddings };
}

/** The corpus' fake embedding: known texts get their vector, anything else a flat one. */
export function embed(corpus, text) {
  return corpus.embeddings[text] ?? Array(corpus.dimension).fill(1 / Math.sqrt(corpus.dimension));
}

function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return dot / Math.sqrt(na * nb);
}

/** The app's own search, for apps without a framework retriever: top-k by cosine, best first. */
export function search(corpus, query, k = corpus.topK) {
  const q = embed(corpus, query);
  return corpus.docs
    .map((doc) => ({ ...doc, score: cosine(q, embed(corpus, doc.text)) }))
    .sort((a, b) => b.score - a.score)
    .slice(0, k);
}

/** The canned answer whose question appears in the prompt the model was sent. */
export function cannedAnswer(corpus, prompt) {
  const question = corpus.questions.find((q) => prompt.includes(q.text));
  return question ? question.answer : "I don't know.";
}

export function formatContexts(texts) {
  return texts.join('\n\n');
}
