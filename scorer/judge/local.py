"""LocalJudge (model="local"): an offline, deterministic judge with no network and no API key.

How it decides (docs/LOCAL_JUDGE.md has the method and the measured agreement). The sample's
language is told from its query and answer, each context's from its own text (`local_lang`);
text becomes terms through that language's stemmer or analyser (`local_text`): stemmed content
words for en, de, es, pt, fr, it, nl, segmented words for zh, ja, ko. A term weighs more when it
carries a fact (numbers, names, code identifiers) and little when it is a generic word.

Then, per context (`local_decide.decide`; a long context sentence pair by sentence pair, so that
one relevant sentence is found and words scattered over a page are not added up):

1. *answer evidence*: what it shares with the reference (the expected output, else the generated
   output) and not with the query: the same terms, the same word in another form, a word of the
   same synonym group. Echoing the query is not support.
2. Without answer evidence worth about one ordinary word, the context is not relevant.
3. With it, the question's subject adds a bonus and naming much of the answer adds another.
4. Evidence is no support when the context's figures differ from the answer's (or are about
   another of the query's figures), when it is another row of the same table, or when it denies
   what the answer affirms.

A sample in Chinese, Japanese or Korean needs that language's analyser, the `cjk` extra: without
it the sample fails (`language_not_installed`, saying so) rather than being guessed at.

A context in a language the judge has no word rules for, or in another language than the
answer, is judged by a language-independent fallback (figures, names, character n-grams); its
reason says so, and `RequestEvent.local_fallbacks` carries one reason per such context, so the
collector can count them (`ctxprec_local_judge_fallback_total{reason}`).

With `reference_kind="query"` (no answer given) it can only measure how much of the query's
weight a context covers, which cannot tell supporting text from on-topic text."""
from __future__ import annotations

import logging
import time
import unicodedata
from typing import Sequence

from ctxprec.scorer.judge.base import JudgeOutcome, truncate
from ctxprec.scorer.judge.chat import JudgeError, RequestEvent, RequestObserver
from ctxprec.scorer.judge.local_decide import DEFAULT_RULES, Finding, Rules, decide, query_share
from ctxprec.scorer.judge.local_lang import Language, identify, identify_context
from ctxprec.scorer.judge.local_text import (
    _LEADING_ANSWER,
    CJK_EXTRA,
    Terms,
    analyser_installed,
    fallback_terms,
    sentences,
    terms,
    with_head,
)
from ctxprec.scorer.result import JudgeUsage, ReferenceKind, Verdict

log = logging.getLogger(__name__)

# Part of the scorer's fingerprint: change it whenever a verdict can change.
LOCAL_PROMPT_VERSION = "local-lexical-v4"
LOCAL_MODEL = "local"
# What the local judge reports per judged sample: it has no network to fail, only its own code.
LOCAL_OUTCOMES = ("ok", "error")
# Why a context was judged by the language-independent fallback (the metric's `reason` label).
FALLBACK_REASONS = ("unsupported_language", "language_mismatch")
# The error type of a sample in a language whose analyser is not installed (the `cjk` extra).
LANGUAGE_NOT_INSTALLED = "language_not_installed"
# A context longer than this many sentences is judged a pair of sentences at a time.
_WINDOW_OVER = 3
_COMPOUNDING = frozenset({"de", "nl", "zh", "ja", "ko"})


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
        fallbacks: list[str] = []
        try:
            outcome = self._judge(query, contexts, reference_kind, reference, fallbacks)
        except Exception:
            self._emit("error", time.perf_counter() - started, ())
            raise
        self._emit("ok", time.perf_counter() - started, tuple(fallbacks))
        return outcome

    def _emit(self, outcome: str, latency_s: float, fallbacks: tuple[str, ...]) -> None:
        if self._observer is None:
            return
        try:
            self._observer(RequestEvent(self.model, outcome, latency_s, local_fallbacks=fallbacks))
        except Exception:  # metrics must never break judging
            log.exception("local judge request observer failed")

    def _judge(self, query: str, contexts: Sequence[str], reference_kind: ReferenceKind, reference: str,
               fallbacks: list[str]) -> JudgeOutcome:
        texts, truncated = truncate(contexts, self.max_context_chars)
        texts, query, reference = [_clean(t) for t in texts], _clean(query), _clean(reference)
        answer = _LEADING_ANSWER.sub("", unicodedata.normalize("NFKC", reference)) if reference_kind != "query" else ""
        sample = identify(f"{query}\n{answer}" if answer.strip() else "\n".join((query, *texts)))
        if not analyser_installed(sample.code):
            raise JudgeError(
                f"the local judge cannot judge {sample.name}: its analyser is not installed (install the cjk "
                f"extra: pip install '{CJK_EXTRA}'), or use an LLM judge", kind=LANGUAGE_NOT_INSTALLED)
        native = _Sample(query, answer, sample)
        results: list[tuple[bool, str, str, Finding | None]] = []
        for text in texts:
            language = identify_context(text, sample)
            reason_note = ""
            if not sample.supported:
                fallbacks.append("unsupported_language")
                reason_note = f" [text in {sample.name}: judged by language-independent overlap (figures, names, character n-grams), without word rules]"
                side = native.fallback()
            elif language.code != sample.code:
                fallbacks.append("language_mismatch")
                reason_note = (f" [context in {language.name}, answer in {sample.name}: judged by language-independent "
                               "overlap (figures, names, character n-grams)]")
                side = native.fallback()
            else:
                side = native
            if reference_kind == "query":
                relevant, why = self._query_only(text, side)
                results.append((relevant, why, reason_note, None))
            else:
                finding = self._decide(text, side)
                results.append((finding.relevant, _why(finding), reason_note, finding))
        strongest = max((f.evidence for _, _, _, f in results if f is not None and f.relevant), default=0.0)
        verdicts = []
        for index, (relevant, why, note, finding) in enumerate(results):
            if (finding is not None and relevant and self.rules.sibling_share
                    and finding.evidence < self.rules.sibling_max and finding.evidence < self.rules.sibling_share * strongest):
                # A lone word beside a context that names much of the answer: a neighbouring
                # entry (another FAQ answer, another row), not support of its own.
                relevant = False
                why = "does not support the answer" + why.removeprefix("supports the answer") + (
                    "; it shares only a word with the answer, where another context names much of it")
            verdicts.append(Verdict(index, relevant, "local judge: " + why + note))
        usage = JudgeUsage(model=self.model, prompt_version=self.prompt_version)
        return JudgeOutcome(verdicts, usage, truncated)

    def _decide(self, text: str, side: "_Sample") -> Finding:
        parts = sentences(text)
        compounds = side.language.code in _COMPOUNDING or side.is_fallback
        if len(parts) <= _WINDOW_OVER:
            whole = with_head(text, side.language, side.terms_of(text))
            return decide(whole, side.query, side.reference, self.rules, compounds=compounds)
        # A long context: each pair of neighbouring sentences on its own; the best one speaks
        # for the context (one sentence may carry the answer; a distractor's words are spread).
        pieces = [side.terms_of(part) for part in parts]
        windows = [pieces[i].merge(pieces[i + 1]) for i in range(len(pieces) - 1)]
        with_head(text, side.language, windows[0])
        findings = [decide(w, side.query, side.reference, self.rules, compounds=compounds) for w in windows]
        return max(findings, key=lambda f: (f.relevant, f.score, f.evidence))

    def _query_only(self, text: str, side: "_Sample") -> tuple[bool, str]:
        context = side.terms_of(text)
        covered, shared = query_share(context, side.query)
        relevant = covered >= self.rules.min_query_share
        lead = "shares the query's key terms" if relevant else "covers too little of the query"
        shown = ", ".join(dict.fromkeys(context.surface[t] for t in shared[:6])) or "none"
        return relevant, (
            f"{lead} ({shown}; {covered:.0%} of the query's weight); no answer was given, so only the query was compared"
        )

    async def explain(self, **_: object) -> str | None:
        return None  # the template reason; there is no model to write one

    async def aclose(self) -> None:
        return None


def _clean(text: str) -> str:
    """Text the analysers can take: lone surrogates (from JSON escapes) and NULs replaced."""
    if text.isascii():
        return text.replace("\x00", " ") if "\x00" in text else text
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", " ")


class _Sample:
    """A sample's query and answer terms, in its language or through the fallback."""

    def __init__(self, query: str, answer: str, language: Language, *, fallback: bool = False) -> None:
        self.language = language
        self.is_fallback = fallback or not language.supported
        self._texts = (query, answer)
        self.query = self.terms_of(query)
        self.reference = self.terms_of(answer)
        self._fallback: _Sample | None = self if self.is_fallback else None

    def terms_of(self, text: str) -> Terms:
        if self.is_fallback:
            return fallback_terms(unicodedata.normalize("NFKC", text), self.language.code)
        return terms(text, self.language)

    def fallback(self) -> "_Sample":
        if self._fallback is None:
            self._fallback = _Sample(*self._texts, self.language, fallback=True)
        return self._fallback


_CONFLICTS = {
    "figures": "its figures differ from the answer's",
    "query figures": "it is about other figures than the question's",
    "code": "it names other code (functions, options) than the answer's",
    "query code": "it is about other code than the question's",
    "row": "it is another row or entry than the one asked about",
    "negation": "it denies what the answer states (or states what the answer denies)",
}


def _why(finding: Finding) -> str:
    shown = ", ".join(finding.answer_terms[:6]) or "none"
    lead = "supports the answer" if finding.relevant else "does not support the answer"
    text = f"{lead}; answer terms found: {shown} (evidence {finding.evidence:.1f}"
    if finding.topic_terms and finding.evidence:
        text += f"; on the question's subject: {', '.join(finding.topic_terms[:4])}"
    text += ")"
    if finding.conflict:
        text += f"; {_CONFLICTS[finding.conflict]}"
    return text
