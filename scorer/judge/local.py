"""LocalJudge (model="local"): an offline, deterministic judge with no network and no API key.

How it decides. Text is split into content words (lowercase, stopwords dropped, a light suffix
stemmer so that "produces", "produced" and "producing" meet; digit groups such as "7,500" are
joined so numbers match exactly). Each word of the reference gets a weight: the inverse document
frequency of the word among this sample's contexts (a word every context shares says little),
doubled for numbers and for words that look like names (capitalised mid-sentence), because those
carry facts. Words of the reference that are *not* in the query carry the evidence: a context that
only echoes the query's words is on topic, but it does not support the answer. A context is
relevant when the weighted share of its own content words found in the reference, and the
absolute weight of answer-specific words it contains, both pass thresholds (see `_decide`).
With `reference_kind="query"` (no answer given) it can only measure overlap with the query.

What it cannot judge. Paraphrase and synonyms beyond stemming ("car" vs "vehicle"), negation
("is not covered" matches "is covered"), contradiction, numbers that differ, reasoning over
several sentences, and other languages than English (words still match, but stopwords and
stemming are English). It is a lexical baseline for demos and air-gapped runs, not a substitute
for an LLM judge. Measured agreement with a careful human's labels on the 46 cases / 231
contexts of `local_cases.jsonl`: run `python -m ctxprec.scorer.judge.local_eval` (docs/LOCAL_JUDGE.md
records the figure)."""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from ctxprec.scorer.judge.base import JudgeOutcome, truncate
from ctxprec.scorer.result import JudgeUsage, ReferenceKind, Verdict

LOCAL_PROMPT_VERSION = "local-lexical-v1"

STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can cannot could did do does doing done down during each
    either etc even ever every few for from further get gets getting got had has have having he
    her here hers herself him himself his how however i if in into is it its itself just less let
    like lot made make makes many may me might more most much must my myself near need needs no
    nor not now of off on once one only or other others our ours ourselves out over own per quite
    rather really same say says shall she should since so some such than that the their theirs
    them themselves then there therefore these they thing things this those though through thus
    to too under until up upon us use used uses using usually very via was way we well were what
    whatever when where whether which while who whom whose why will with within without would
    yes yet you your yours yourself yourselves
    mine i'm it's don't doesn't
    """.split()
)

_WORD_RE = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_DIGIT_GROUP_RE = re.compile(r"(?<=\d)[,\s](?=\d{3}\b)")
_SUFFIXES = (
    "ational", "ization", "fulness", "ousness", "iveness", "ations", "ation", "ments", "ment",
    "ness", "ings", "ing", "ies", "ied", "ers", "er", "ed", "ly", "es", "s",
)


def stem(word: str) -> str:
    if word.isdigit() or len(word) <= 3:
        return word
    if word.endswith("'s"):
        word = word[:-2]
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                break
            word = word[: -len(suffix)]
            if suffix in ("ies", "ied"):
                word += "y"
            break
    # "produce" / "produc(ed)": drop a final e and undouble a final consonant ("stopped" -> "stop").
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
        word = word[:-1]
    return word


@dataclass(frozen=True, slots=True)
class Terms:
    words: frozenset[str]  # stemmed content words
    salient: frozenset[str]  # numbers and name-like words (carry facts)
    surface: dict[str, str]  # stem -> the word as first written, for readable reasons


def terms(text: str) -> Terms:
    text = _DIGIT_GROUP_RE.sub("", text)
    words: set[str] = set()
    salient: set[str] = set()
    surface: dict[str, str] = {}
    sentence_start = True
    for match in _WORD_RE.finditer(text):
        raw = match.group(0)
        lower = raw.lower()
        start = match.start()
        # A capital right after a sentence end is grammar, not a name.
        prefix = text[max(0, start - 2) : start]
        sentence_start = start == 0 or any(p in prefix for p in ".!?:\n")
        if lower in STOPWORDS:
            continue
        token = stem(lower)
        if len(token) < 2 and not token.isdigit():
            continue
        words.add(token)
        surface.setdefault(token, lower)
        if any(ch.isdigit() for ch in raw) or (raw[0].isupper() and not sentence_start):
            salient.add(token)
    return Terms(frozenset(words), frozenset(salient), surface)


# Thresholds of `_decide`, set once against the labelled cases; see docs/LOCAL_JUDGE.md.
MIN_SUPPORT_SHARE = 0.25  # share of the context's weighted words found in the reference
MIN_ANSWER_EVIDENCE = 1.5  # weight of answer-specific words (not in the query) the context has
MIN_QUERY_SHARE = 0.5  # reference_kind="query": share of the query's weight the context covers


class LocalJudge:
    annotator_kind = "CODE"
    prompt_version = LOCAL_PROMPT_VERSION

    def __init__(self, *, max_context_chars: int = 4000, model: str = "local") -> None:
        self.model = model
        self.max_context_chars = max_context_chars

    async def judge(
        self, query: str, contexts: Sequence[str], *, reference_kind: ReferenceKind, reference: str
    ) -> JudgeOutcome:
        return self.judge_sync(query, contexts, reference_kind=reference_kind, reference=reference)

    def judge_sync(
        self, query: str, contexts: Sequence[str], *, reference_kind: ReferenceKind, reference: str
    ) -> JudgeOutcome:
        texts, truncated = truncate(contexts, self.max_context_chars)
        context_terms = [terms(t) for t in texts]
        query_terms = terms(query)
        reference_terms = terms(reference) if reference_kind != "query" else query_terms
        df = Counter(word for ct in context_terms for word in ct.words)
        n = len(texts)

        def weight(word: str, salient: bool) -> float:
            idf = math.log(1.0 + n / (df.get(word, 0) or 1)) / math.log(1.0 + n) if n > 1 else 1.0
            return idf * (2.0 if salient else 1.0)

        verdicts = []
        for index, ct in enumerate(context_terms):
            relevant, why = _decide(ct, query_terms, reference_terms, reference_kind, weight)
            verdicts.append(Verdict(index, relevant, "local judge: " + why))
        usage = JudgeUsage(model=self.model, prompt_version=self.prompt_version)
        return JudgeOutcome(verdicts, usage, truncated)

    async def explain(self, **_: object) -> str | None:
        return None  # the template reason; there is no model to write one

    async def aclose(self) -> None:
        return None


def _decide(ct: Terms, query: Terms, reference: Terms, reference_kind: str, weight) -> tuple[bool, str]:
    salient = ct.salient | reference.salient
    if not ct.words:
        return False, "the context has no content words"
    shared = ct.words & (reference.words | query.words)
    own_weight = sum(weight(w, w in salient) for w in ct.words)
    if reference_kind == "query":
        query_weight = sum(weight(w, w in salient) for w in query.words) or 1.0
        covered = sum(weight(w, w in salient) for w in ct.words & query.words) / query_weight
        relevant = covered >= MIN_QUERY_SHARE
        return relevant, _why(relevant, [ct.surface[w] for w in sorted(ct.words & query.words)], "query", covered)
    answer_only = (ct.words & reference.words) - query.words
    evidence = sum(weight(w, w in salient) for w in answer_only)
    support = sum(weight(w, w in salient) for w in shared) / own_weight
    relevant = evidence >= MIN_ANSWER_EVIDENCE and support >= MIN_SUPPORT_SHARE
    words = sorted(answer_only, key=lambda w: (-weight(w, w in salient), w))
    return relevant, _why(relevant, [ct.surface[w] for w in words], "answer", support, evidence)


def _why(relevant: bool, words: list[str], against: str, share: float, evidence: float | None = None) -> str:
    shown = ", ".join(words[:6]) if words else "none"
    if against == "query":
        lead = "shares the query's key terms" if relevant else "covers too little of the query"
        return f"{lead} ({shown}; {share:.0%} of the query's weight); no answer was given, so only the query was compared"
    lead = "supports the answer" if relevant else "does not support the answer"
    return f"{lead}; answer terms found: {shown} (evidence {evidence:.1f}, {share:.0%} of its terms shared)"
