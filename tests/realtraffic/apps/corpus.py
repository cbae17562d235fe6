"""Fixed corpus shared by every framework app.

Each question lists the documents a retriever returns for it, in rank order, and which of
those are relevant, so a run's expected context precision is known in advance. The
orders are the ones Haystack's InMemoryBM25Retriever produces (top_k=3); the vector-store
apps reproduce them through `embed_text`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TOP_K = 3


@dataclass(frozen=True)
class Doc:
    doc_id: str
    text: str


@dataclass(frozen=True)
class RunResult:
    """What one question's run returned, as the app saw it."""

    query: str
    contexts: list[str]
    context_ids: list[str]
    answer: str


@dataclass(frozen=True)
class Question:
    question_id: str
    text: str
    retrieved_ids: tuple[str, ...]
    relevant_ids: frozenset[str]
    answer: str


DOCS: tuple[Doc, ...] = (
    Doc("kb-01", "The Kestrel K2 e-bike battery stores 504 Wh and gives a range of up to 90 km in eco mode."),
    Doc("kb-02", "Charging an empty Kestrel K2 battery to full takes about 4.5 hours with the standard 4 A charger."),
    Doc("kb-03", "The K2 frame is built from 6061 aluminium; the whole bike weighs 21 kg including the battery."),
    Doc("kb-04", "Kestrel gives a two-year warranty on the motor and battery, and a five-year warranty on the frame."),
    Doc("kb-05", "The K2 mid-drive motor delivers 85 Nm of torque and assists up to 25 km/h in the EU."),
    Doc("kb-06", "Kestrel service centres in Utrecht, Ghent and Freiburg are open Monday to Saturday."),
    Doc("kb-07", "To reset the K2 display, hold the power and minus buttons together for ten seconds."),
    Doc("kb-08", "The K2 comes in three frame sizes: S for riders 155-170 cm, M for 168-183 cm and L for 181-196 cm."),
)

QUESTIONS: tuple[Question, ...] = (
    Question(
        "q1",
        "How long does charging the K2 battery take, and what range does it give?",
        ("kb-01", "kb-02", "kb-04"),
        frozenset({"kb-01", "kb-02"}),
        "A full charge takes about 4.5 hours with the standard 4 A charger, "
        "and the 504 Wh battery gives up to 90 km of range in eco mode.",
    ),
    Question(
        "q2",
        "How long is the K2 frame covered?",
        ("kb-03", "kb-08", "kb-04"),
        frozenset({"kb-04"}),
        "The K2 frame is covered by Kestrel's five-year frame warranty; the motor and battery have two years.",
    ),
    Question(
        "q3",
        "How do I reset the K2 display?",
        ("kb-07", "kb-03", "kb-05"),
        frozenset({"kb-07"}),
        "Hold the power and minus buttons together for ten seconds to reset the K2 display.",
    ),
)

DOC_BY_ID: dict[str, Doc] = {d.doc_id: d for d in DOCS}
QUESTION_BY_TEXT: dict[str, Question] = {q.text: q for q in QUESTIONS}
EMBED_DIM = len(DOCS)

# Similarity given to the retriever's ranks 1..TOP_K; the rest get a small floor so no
# vector is all zeros.
_RANK_WEIGHTS = (0.9, 0.7, 0.5)
_FLOOR = 0.05


def embed_text(text: str) -> list[float]:
    """A fake embedding that pins the vector-store ranking to `Question.retrieved_ids`.

    Documents are one-hot on their own axis; a known question weights the axes of its
    retrieved documents by rank, so cosine similarity reproduces that order in any vector
    store. Any other text gets a flat vector.
    """
    doc_index = {d.text: i for i, d in enumerate(DOCS)}
    if text in doc_index:
        vec = [0.0] * EMBED_DIM
        vec[doc_index[text]] = 1.0
        return vec
    question = QUESTION_BY_TEXT.get(text)
    if question is None:
        return [1.0 / math.sqrt(EMBED_DIM)] * EMBED_DIM
    vec = [_FLOOR] * EMBED_DIM
    ids = [d.doc_id for d in DOCS]
    for rank, doc_id in enumerate(question.retrieved_ids):
        vec[ids.index(doc_id)] = _RANK_WEIGHTS[rank]
    return vec


def canned_answer_for(prompt: str) -> str:
    """Pick the canned answer whose question appears in the prompt the model was sent."""
    for question in QUESTIONS:
        if question.text in prompt:
            return question.answer
    return "I don't know."


def format_contexts(texts: list[str]) -> str:
    return "\n\n".join(texts)
