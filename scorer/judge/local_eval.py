"""Agreement of the local judge with a careful human's labels (`local_cases.jsonl`, package data).

`python -m ctxprec.scorer.judge.local_eval` prints verdict agreement overall and per class, and lists the
disagreements with `--verbose`. The labels were written before the judge was tuned and are not
changed to suit it."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ctxprec.scorer.judge.local import LocalJudge

LABELS = ("relevant", "irrelevant")


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


def load_cases() -> list[dict[str, Any]]:
    text = resources.files("ctxprec.scorer.judge").joinpath("local_cases.jsonl").read_text(encoding="utf-8")
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        case = json.loads(line)
        if len(case["contexts"]) != len(case["labels"]) or any(label not in LABELS for label in case["labels"]):
            raise ValueError(f"local_cases.jsonl line {number}: contexts and labels must pair up, labels in {LABELS}")
        cases.append(case)
    return cases


def evaluate(cases: list[dict[str, Any]] | None = None, judge: LocalJudge | None = None) -> Agreement:
    judge = judge or LocalJudge()
    result = Agreement()
    for case in cases if cases is not None else load_cases():
        outcome = judge.judge_sync(case["question"], case["contexts"], reference_kind="output", reference=case["answer"])
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Agreement of the local judge with human labels")
    parser.add_argument("--verbose", action="store_true", help="list every disagreement")
    args = parser.parse_args(argv)
    result = evaluate()
    out = sys.stdout
    out.write(f"cases: {result.cases}, contexts: {result.contexts}\n")
    out.write(f"verdict agreement: {result.rate:.1%} ({result.agree}/{result.contexts})\n")
    out.write(
        f"human relevant -> judge relevant: {result.true_pos}/{result.true_pos + result.false_neg}; "
        f"human irrelevant -> judge irrelevant: {result.true_neg}/{result.true_neg + result.false_pos}\n"
    )
    if args.verbose:
        for line in result.disagreements:
            out.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
