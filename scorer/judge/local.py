"""LocalJudge (model="local"): an offline, deterministic judge with no network and no API key.

How it decides (docs/LOCAL_JUDGE.md has the measured agreement). The sample's language is told
from its script and common words (`local_text.detect_language`); text becomes terms: stemmed
content words for English and French, character bigrams for Japanese, character n-grams for
other scripts. A term weighs more when it carries a fact (numbers, names, katakana) and little
when it is a generic word (`time`, `people`, units).

Then, per context:

1. *answer evidence*: the weight of the terms it shares with the reference (the expected output,
   else the generated output) that are not in the query. Echoing the query is not support;
   naming what the answer names (Fleming, 1928, Canberra, pollen) is.
2. Without answer evidence worth at least one ordinary word, the context is not relevant,
   however much of the query it repeats: that is a topical distractor.
3. With it, words shared with the query add a bonus (the context is about the question's
   subject, not just mentioning an answer word in passing), and numbers that contradict the
   answer's (the context has numbers, none of them the answer's) take a penalty.
4. Relevant when evidence + bonus - penalty reaches the threshold.

With `reference_kind="query"` (no answer given) it can only measure how much of the query's
weight a context covers, which cannot tell supporting text from on-topic text.

What it cannot judge: paraphrase and synonyms beyond stemming ("car" vs "vehicle"), negation
("is not covered" matches "is covered"), reasoning over several sentences, and a topical
distractor that happens to name an answer word. For text in scripts other than Latin and
Japanese it matches characters only, and says so in the reason."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Sequence

from ctxprec.scorer.judge.base import JudgeOutcome, truncate
from ctxprec.scorer.judge.chat import RequestEvent, RequestObserver
from ctxprec.scorer.judge.local_text import (
    STRONG,
    WEAK,
    Language,
    Terms,
    detect_language,
    terms,
)
from ctxprec.scorer.result import JudgeUsage, ReferenceKind, Verdict

log = logging.getLogger(__name__)

LOCAL_PROMPT_VERSION = "local-lexical-v2"
LOCAL_MODEL = "local"
# What the local judge reports per judged sample: it has no network to fail, only its own code.
LOCAL_OUTCOMES = ("ok", "error")


@dataclass(frozen=True, slots=True)
class Rules:
    """The decision's thresholds (chosen on the development splits; see docs/LOCAL_JUDGE.md)."""

    min_evidence: float = 0.9  # answer-specific weight needed at all: one ordinary word, not a generic one
    topic_bonus: float = 0.25  # per unit of query weight the context shares...
    topic_cap: float = 2.0  # ...counted up to this much query weight
    coverage_bonus: float = 3.0  # times the share of the answer's own weight the context names
    conflict_penalty: float = 2.0  # the context's numbers are all different from the answer's
    threshold: float = 1.5
    near_match: float = 0.8  # weight factor of a word the answer has in another form (prefix match)
    min_query_share: float = 0.5  # reference_kind="query": share of the query's weight covered


DEFAULT_RULES = Rules()


@dataclass(frozen=True, slots=True)
class Finding:
    relevant: bool
    answer_terms: tuple[str, ...]  # as written in the context, strongest first
    topic_terms: tuple[str, ...]
    evidence: float
    score: float
    conflict: bool


class LocalJudge:
    annotator_kind = "CODE"
    prompt_version = LOCAL_PROMPT_VERSION

    def __init__(
        self,
        *,
        max_context_chars: int = 4000,
        model: str = LOCAL_MODEL,
        observer: RequestObserver | None = None,
        rules: Rules = DEFAULT_RULES,
    ) -> None:
        self.model = model
        self.max_context_chars = max_context_chars
        self.rules = rules
        # Reported like a remote judge's HTTP attempt (one per judged sample), so that judge
        # request and latency metrics have data when the local judge is the one in use.
        self._observer = observer

    async def judge(
        self, query: str, contexts: Sequence[str], *, reference_kind: ReferenceKind, reference: str
    ) -> JudgeOutcome:
        return self.judge_sync(query, contexts, reference_kind=reference_kind, reference=reference)

    def judge_sync(
        self, query: str, contexts: Sequence[str], *, reference_kind: ReferenceKind, reference: str
    ) -> JudgeOutcome:
        started = time.perf_counter()
        try:
            outcome = self._judge(query, contexts, reference_kind, reference)
        except Exception:
            self._emit("error", time.perf_counter() - started)
            raise
        self._emit("ok", time.perf_counter() - started)
        return outcome

    def _emit(self, outcome: str, latency_s: float) -> None:
        if self._observer is None:
            return
        try:
            self._observer(RequestEvent(self.model, outcome, latency_s))
        except Exception:  # metrics must never break judging
            log.exception("local judge request observer failed")

    def _judge(self, query: str, contexts: Sequence[str], reference_kind: ReferenceKind, reference: str) -> JudgeOutcome:
        texts, truncated = truncate(contexts, self.max_context_chars)
        answer = reference if reference_kind != "query" else ""
        language = detect_language(" ".join((query, answer, *texts)))
        context_terms = [terms(t, language) for t in texts]
        query_terms = terms(query, language)
        verdicts = []
        if reference_kind == "query":
            for index, ct in enumerate(context_terms):
                relevant, why = _query_only(ct, query_terms, self.rules)
                verdicts.append(Verdict(index, relevant, "local judge: " + why + _script_note(language)))
        else:
            reference_terms = terms(answer, language)
            for index, ct in enumerate(context_terms):
                finding = decide(ct, query_terms, reference_terms, self.rules)
                verdicts.append(Verdict(index, finding.relevant, "local judge: " + _why(finding) + _script_note(language)))
        usage = JudgeUsage(model=self.model, prompt_version=self.prompt_version)
        return JudgeOutcome(verdicts, usage, truncated)

    async def explain(self, **_: object) -> str | None:
        return None  # the template reason; there is no model to write one

    async def aclose(self) -> None:
        return None


def _strength(term: str, context: Terms, reference: Terms) -> float:
    """How much a shared term says: as little as either text says of it (a name in the answer
    met as a common word in the context, "Retry-After" vs "retried", is only a word). A word
    capitalised only at a sentence start may or may not be a name: the other text decides."""
    ours, theirs = context.weights[term], reference.weights[term]
    if term in reference.unsure:
        theirs = max(theirs, ours) if theirs > WEAK else theirs
    if term in context.unsure:
        ours = max(ours, theirs) if ours > WEAK else ours
    return min(ours, theirs)


def _near(term: str, others: dict[str, float]) -> str | None:
    """A term of `others` that is the same word in another form the stemmer does not join
    ("japan" / "japanese", "fail" / "failure"): one is a prefix of the other, at least five
    letters long."""
    if len(term) < 4 or not term.isalpha():
        return None
    for other in others:
        if len(other) >= 4 and other.isalpha() and other != term:
            short, long = (term, other) if len(term) <= len(other) else (other, term)
            if len(short) >= 5 and long.startswith(short):
                return other
    return None


def decide(context: Terms, query: Terms, reference: Terms, rules: Rules = DEFAULT_RULES) -> Finding:
    answer_only = [t for t in context.weights if t in reference.weights and t not in query.weights]
    weights = {t: _strength(t, context, reference) for t in answer_only}
    if rules.near_match:
        for t in context.weights:
            if t in reference.weights or t in query.weights:
                continue
            other = _near(t, reference.weights)
            if other is not None and other not in query.weights and _near(t, query.weights) is None:
                answer_only.append(t)
                weights[t] = rules.near_match * reference.weights[other]
    evidence = sum(weights.values())
    topic = [t for t in context.weights if t in query.weights]
    topic_weight = sum(context.weights[t] for t in topic)
    conflict = _numbers_conflict(context, reference)
    answer_weight = sum(w for t, w in reference.weights.items() if t not in query.weights)
    coverage = min(1.0, evidence / answer_weight) if answer_weight else 0.0
    score = 0.0
    if evidence >= rules.min_evidence:
        score = evidence + rules.topic_bonus * min(topic_weight, rules.topic_cap) + rules.coverage_bonus * coverage
        if conflict:
            score -= rules.conflict_penalty
    relevant = score >= rules.threshold
    ranked = sorted(answer_only, key=lambda t: (-weights[t], t))
    return Finding(
        relevant,
        tuple(dict.fromkeys(context.surface[t] for t in ranked)),
        tuple(dict.fromkeys(context.surface[t] for t in topic)),
        evidence,
        score,
        conflict,
    )


def _numbers_conflict(context: Terms, reference: Terms) -> bool:
    """Both name figures (10 and up: small counts are everywhere) and none is the same."""
    ours = {n for n in context.numbers if context.weights.get(n, 0.0) >= STRONG}
    theirs = {n for n in reference.numbers if reference.weights.get(n, 0.0) >= STRONG}
    return bool(ours and theirs and not ours & theirs)


def _query_only(context: Terms, query: Terms, rules: Rules) -> tuple[bool, str]:
    query_weight = sum(query.weights.values())
    shared = [t for t in context.weights if t in query.weights]
    covered = sum(query.weights[t] for t in shared) / query_weight if query_weight else 0.0
    relevant = covered >= rules.min_query_share
    lead = "shares the query's key terms" if relevant else "covers too little of the query"
    shown = ", ".join(dict.fromkeys(context.surface[t] for t in shared[:6])) or "none"
    return relevant, (
        f"{lead} ({shown}; {covered:.0%} of the query's weight); no answer was given, so only the query was compared"
    )


def _why(finding: Finding) -> str:
    shown = ", ".join(finding.answer_terms[:6]) or "none"
    lead = "supports the answer" if finding.relevant else "does not support the answer"
    text = f"{lead}; answer terms found: {shown} (evidence {finding.evidence:.1f}"
    if finding.topic_terms and finding.evidence:
        text += f"; on the question's subject: {', '.join(finding.topic_terms[:4])}"
    text += ")"
    if finding.conflict:
        text += "; its numbers differ from the answer's"
    return text


def _script_note(language: Language) -> str:
    if language.lexical:
        return ""
    script = "an unrecognised" if language.script == "other" else f"{language.script}"
    return f" [text in {script} script: judged by character overlap only, without word rules]"

