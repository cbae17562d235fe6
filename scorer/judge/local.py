"""LocalJudge (model="local"): an offline, deterministic judge with no network and no API key.

How it decides (docs/LOCAL_JUDGE.md has the method and the measured agreement). The sample's
language is told from its script and common words (`local_text.detect_language`); text becomes
terms: stemmed content words for English and French, character bigrams for Japanese, character
n-grams for other scripts. A term weighs more when it carries a fact (numbers, names, katakana,
code identifiers) and little when it is a generic word (`time`, `people`, units).

Then, per context (`local_decide.decide`):

1. *answer evidence*: what it shares with the reference (the expected output, else the generated
   output) and not with the query: the same terms, the same word in another form, a word of the
   same small synonym group ("phone" for "call", `local_synonyms`), in Japanese a kanji shared
   inside different words. Echoing the query is not support; naming what the answer names
   (Fleming, 1928, Canberra, pollen) is.
2. Without answer evidence worth about one ordinary word, the context is not relevant, however
   much of the query it repeats: that is a topical distractor.
3. With it, the question's subject (its words or their synonyms) adds a bonus, naming much of
   the answer adds another, and figures that contradict the answer's take a penalty.
4. Relevant when the score reaches the threshold.

With `reference_kind="query"` (no answer given) it can only measure how much of the query's
weight a context covers, which cannot tell supporting text from on-topic text.

What it cannot judge: paraphrase beyond stemming and its synonym groups, negation ("is not
covered" matches "is covered"), reasoning over several sentences, and a topical distractor that
happens to name an answer word. For text in scripts other than Latin and Japanese it matches
characters only, and says so in the reason."""
from __future__ import annotations

import logging
import time
from typing import Sequence

from ctxprec.scorer.judge.base import JudgeOutcome, truncate
from ctxprec.scorer.judge.chat import RequestEvent, RequestObserver
from ctxprec.scorer.judge.local_decide import DEFAULT_RULES, Finding, Rules, decide
from ctxprec.scorer.judge.local_text import Language, Terms, detect_language, terms
from ctxprec.scorer.result import JudgeUsage, ReferenceKind, Verdict

log = logging.getLogger(__name__)

# Part of the scorer's fingerprint: change it whenever a verdict can change.
LOCAL_PROMPT_VERSION = "local-lexical-v3"
LOCAL_MODEL = "local"
# What the local judge reports per judged sample: it has no network to fail, only its own code.
LOCAL_OUTCOMES = ("ok", "error")


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

