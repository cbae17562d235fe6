"""Agreement of the local judge with human labels, per labelled set and split (package data).

Sets (JSONL, one case per line: question, answer, contexts, labels; the newer ones also carry
id, language and style):

- `original`: `local_cases.jsonl`, the first 46 English cases;
- `en-dev`, `en-heldout`: 160 English cases in several labelling styles;
- `fr-dev`, `fr-heldout`, `ja-dev`, `ja-heldout`: French and Japanese cases;
- `en-dev2`, `fr-dev2`, `ja-dev2`: a second development split, written (and committed) before
  the judge changes tuned on it;
- a third round in eleven styles (paraphrase, low-overlap, numbers, table, code, faq, domain,
  long, near-duplicate, negation, multi-hop): `en-dev3` / `en-heldout2` (60 cases each),
  `fr-dev3` / `fr-heldout2`, `ja-dev3` / `ja-heldout2` and `de`, `es`, `pt`, `it`, `nl`, `zh`,
  `ko` `-dev` / `-heldout` (15 cases each), and `mixed-dev` / `mixed-heldout`: contexts in
  another language than the answer, and languages the judge has no word rules for.

Every set was labelled before the judge was tuned on it, and labels are never changed to suit
the judge. Rules and thresholds may be chosen on the dev splits only; the held-out splits
estimate how the judge does on text it was not tuned on.

    python -m ctxprec.scorer.judge.local_eval                 # every set, answer as reference
    python -m ctxprec.scorer.judge.local_eval --set en-dev --verbose --by-style
    python -m ctxprec.scorer.judge.local_eval --query-only    # no answer: the query alone
    python -m ctxprec.scorer.judge.local_eval --summary heldout  # the third round's held-out split:
                                          # overall, per language, per style, beside the naive baseline

Every figure comes with the naive baseline's beside it (`NaiveJudge`): a context is relevant when
it shares at least two content words with the answer (the language's stopwords left out, words
compared as written), or, in Chinese, Japanese and Korean, at least three character bigrams.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterable, TextIO

from ctxprec.scorer.judge.base import JudgeOutcome
from ctxprec.scorer.judge.local import LocalJudge
from ctxprec.scorer.judge.local_lang import identify
from ctxprec.scorer.judge.local_words import word_data
from ctxprec.scorer.result import JudgeUsage, ReferenceKind, Verdict

LABELS = ("relevant", "irrelevant")
SETS: dict[str, str] = {
    "original": "local_cases.jsonl",
    "en-dev": "local_cases_en_dev.jsonl",
    "en-heldout": "local_cases_en_heldout.jsonl",
    "fr-dev": "local_cases_fr_dev.jsonl",
    "fr-heldout": "local_cases_fr_heldout.jsonl",
    "ja-dev": "local_cases_ja_dev.jsonl",
    "ja-heldout": "local_cases_ja_heldout.jsonl",
    "en-dev2": "local_cases_en_dev2.jsonl",
    "fr-dev2": "local_cases_fr_dev2.jsonl",
    "ja-dev2": "local_cases_ja_dev2.jsonl",
    # The third round (issue 23): eleven styles, ten languages, cross-language and unsupported
    # languages; written and committed before the judge was changed for them.
    "en-dev3": "local_cases_en_dev3.jsonl",
    "en-heldout2": "local_cases_en_heldout2.jsonl",
    "fr-dev3": "local_cases_fr_dev3.jsonl",
    "fr-heldout2": "local_cases_fr_heldout2.jsonl",
    "ja-dev3": "local_cases_ja_dev3.jsonl",
    "ja-heldout2": "local_cases_ja_heldout2.jsonl",
    **{f"{lang}-{split}": f"local_cases_{lang}_{split}.jsonl"
       for lang in ("de", "es", "pt", "it", "nl", "zh", "ko", "mixed") for split in ("dev", "heldout")},
}


# The third round's splits (written for issue 23): what `--summary` reports, per language.
THIRD_ROUND = {
    "dev": ("en-dev3", "fr-dev3", "ja-dev3", "de-dev", "es-dev", "pt-dev", "it-dev", "nl-dev", "zh-dev", "ko-dev"),
    "heldout": ("en-heldout2", "fr-heldout2", "ja-heldout2", "de-heldout", "es-heldout", "pt-heldout", "it-heldout",
                "nl-heldout", "zh-heldout", "ko-heldout"),
}


@dataclass
class Agreement:
    cases: int = 0
    contexts: int = 0
    agree: int = 0
    true_pos: int = 0
    false_pos: int = 0
    false_neg: int = 0
    true_neg: int = 0
    disagreements: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.agree / self.contexts if self.contexts else 0.0

    @property
    def relevant_recall(self) -> float:
        return self.true_pos / (self.true_pos + self.false_neg) if self.true_pos + self.false_neg else 0.0

    @property
    def irrelevant_recall(self) -> float:
        return self.true_neg / (self.true_neg + self.false_pos) if self.true_neg + self.false_pos else 0.0

    @property
    def relevant_precision(self) -> float:
        return self.true_pos / (self.true_pos + self.false_pos) if self.true_pos + self.false_pos else 0.0


_WORD_RE = re.compile(r"[^\W_]+")
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")


class NaiveJudge:
    """The baseline every figure is read against: relevant when the context shares at least two
    content words with the answer (or, in Chinese, Japanese and Korean, three character bigrams)."""

    def judge_sync(self, query: str, contexts: list[str], *, reference_kind: ReferenceKind, reference: str) -> JudgeOutcome:
        answer = reference if reference_kind != "query" else query
        language = identify(f"{query}\n{answer}")
        stop = word_data(language.code).stopwords
        ours = self._units(answer, stop)
        verdicts = []
        for index, text in enumerate(contexts):
            words, grams = self._units(text, stop)
            shared_words, shared_grams = len(words & ours[0]), len(grams & ours[1])
            relevant = shared_words >= 2 or shared_grams >= 3
            verdicts.append(Verdict(index, relevant, f"naive: {shared_words} words, {shared_grams} bigrams shared"))
        return JudgeOutcome(verdicts, JudgeUsage(model="naive", prompt_version="naive"), False)

    @staticmethod
    def _units(text: str, stop: frozenset[str]) -> tuple[set[str], set[str]]:
        text = unicodedata.normalize("NFKC", text).lower()
        grams = {run[i : i + 2] for run in _CJK_RE.findall(text) for i in range(len(run) - 1)}
        words = {w for w in _WORD_RE.findall(text) if w not in stop and not _CJK_RE.fullmatch(w)}
        return words, grams


def load_cases(name: str = "original") -> list[dict[str, Any]]:
    if name not in SETS:
        raise ValueError(f"unknown set {name!r}; one of {', '.join(SETS)}")
    filename = SETS[name]
    text = resources.files("ctxprec.scorer.judge").joinpath(filename).read_text(encoding="utf-8")
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        case = json.loads(line)
        if len(case["contexts"]) != len(case["labels"]) or any(label not in LABELS for label in case["labels"]):
            raise ValueError(f"{filename} line {number}: contexts and labels must pair up, labels in {LABELS}")
        cases.append(case)
    return cases


def evaluate(
    cases: Iterable[dict[str, Any]] | None = None,
    judge: LocalJudge | NaiveJudge | None = None,
    *,
    reference_kind: ReferenceKind = "output",
) -> Agreement:
    """Verdict agreement on `cases` (default: the original set). With reference_kind="query" the
    judge sees no answer, as when a trace carries neither output nor expected output."""
    judge = judge or LocalJudge()
    result = Agreement()
    for case in cases if cases is not None else load_cases():
        reference = case["answer"] if reference_kind != "query" else ""
        outcome = judge.judge_sync(case["question"], case["contexts"], reference_kind=reference_kind, reference=reference)
        result.cases += 1
        for verdict, label, text in zip(outcome.verdicts, case["labels"], case["contexts"]):
            human = label == "relevant"
            result.contexts += 1
            if verdict.relevant == human:
                result.agree += 1
                result.true_pos += human
                result.true_neg += not human
            else:
                result.false_pos += not human
                result.false_neg += human
                result.disagreements.append(f"[human: {label}] Q: {case['question']} | C: {text} | {verdict.reason}")
    return result


def by_style(cases: list[dict[str, Any]], judge: LocalJudge | NaiveJudge, reference_kind: ReferenceKind) -> dict[str, Agreement]:
    styles: dict[str, list[dict[str, Any]]] = {}
    for case in cases:
        styles.setdefault(case.get("style", "-"), []).append(case)
    return {style: evaluate(group, judge, reference_kind=reference_kind) for style, group in sorted(styles.items())}


def _row(name: str, result: Agreement, naive: Agreement | None = None) -> str:
    row = (
        f"{name:<14} {result.cases:>5} {result.contexts:>8} {result.rate:>9.1%} {result.agree:>5}/{result.contexts:<5}"
        f" {result.true_pos:>4}/{result.true_pos + result.false_neg:<4} {result.true_neg:>4}/{result.true_neg + result.false_pos:<4}"
    )
    return row + (f" {naive.rate:>8.1%}" if naive is not None else "")


def report(names: list[str], *, reference_kind: ReferenceKind, verbose: bool, styles: bool, out: TextIO) -> None:
    judge, naive = LocalJudge(), NaiveJudge()
    mode = "query only (no answer)" if reference_kind == "query" else "reference = answer"
    out.write(f"local judge agreement with human labels, {mode}\n")
    out.write(f"{'set':<14} {'cases':>5} {'contexts':>8} {'agreement':>9} {'agree':>11} {'rel->rel':>9} {'irr->irr':>9}"
              f" {'naive':>8}\n")
    for name in names:
        cases = load_cases(name)
        result = evaluate(cases, judge, reference_kind=reference_kind)
        out.write(_row(name, result, evaluate(cases, naive, reference_kind=reference_kind)) + "\n")
        if styles and any("style" in case for case in cases):
            baseline = by_style(cases, naive, reference_kind)
            for style, part in by_style(cases, judge, reference_kind).items():
                out.write(_row(f"  {style}", part, baseline[style]) + "\n")
        if verbose:
            for line in result.disagreements:
                out.write(f"    {line}\n")


def summary(split: str, out: TextIO) -> None:
    """The third round's `split` as one: overall, per language and per style, local judge beside
    the naive baseline, with the relevant class's precision and recall."""
    judge, naive = LocalJudge(), NaiveJudge()
    cases = [case for name in THIRD_ROUND[split] for case in load_cases(name)]
    groups: dict[str, list[dict[str, Any]]] = {"all": cases}
    for case in cases:
        groups.setdefault(f"language {case['language']}", []).append(case)
    for case in cases:
        groups.setdefault(f"style {case['style']}", []).append(case)
    out.write(f"third round, {split} split: local judge / naive baseline\n")
    out.write(f"{'group':<24} {'contexts':>8} {'local':>7} {'naive':>7} {'precision':>17} {'recall':>17}\n")
    for name, group in groups.items():
        ours, theirs = evaluate(group, judge), evaluate(group, naive)
        out.write(f"{name:<24} {ours.contexts:>8} {ours.rate:>7.1%} {theirs.rate:>7.1%}"
                  f" {ours.relevant_precision:>8.1%} / {theirs.relevant_precision:<6.1%}"
                  f" {ours.relevant_recall:>8.1%} / {theirs.relevant_recall:<6.1%}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Agreement of the local judge with human labels")
    parser.add_argument("--set", dest="sets", action="append", choices=list(SETS), help="a set to score (repeatable; default: all)")
    parser.add_argument("--query-only", action="store_true", help="give the judge no answer, only the query")
    parser.add_argument("--by-style", action="store_true", help="also break each set down by labelling style")
    parser.add_argument("--verbose", action="store_true", help="list every disagreement")
    parser.add_argument("--summary", choices=list(THIRD_ROUND), help="the third round's split as one, per language and style")
    args = parser.parse_args(argv)
    if args.summary:
        summary(args.summary, sys.stdout)
        return 0
    report(args.sets or list(SETS), reference_kind="query" if args.query_only else "output",
           verbose=args.verbose, styles=args.by_style, out=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
