"""The offline judge: agreement with the human-labelled cases, determinism, what it reports."""
from __future__ import annotations

import subprocess
import sys

from ctxprec.scorer.judge.local import LocalJudge, stem, terms
from ctxprec.scorer.judge.local_eval import SETS, evaluate, load_cases


def test_labelled_set_is_big_enough_and_balanced() -> None:
    cases = load_cases()
    labels = [label for case in cases for label in case["labels"]]
    assert len(cases) >= 40 and len(labels) >= 200
    assert 0.3 < labels.count("relevant") / len(labels) < 0.7

def test_agreement_with_human_labels_is_at_least_85_percent() -> None:
    result = evaluate()
    assert result.rate >= 0.85, "\n".join(result.disagreements)
    # Both classes must be judged well, not one at the expense of the other.
    assert result.true_pos / (result.true_pos + result.false_neg) >= 0.8
    assert result.true_neg / (result.true_neg + result.false_pos) >= 0.8

def test_cli_prints_agreement_per_set_and_split() -> None:
    out = subprocess.run([sys.executable, "-m", "ctxprec.scorer.judge.local_eval"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert set(rows) == set(SETS)
    # The original set's row carries its own size: 46 cases, 231 contexts.
    assert rows["original"][1:3] == ["46", "231"]
    assert all(row[3].endswith("%") for row in rows.values())

async def test_verdicts_are_deterministic_and_say_they_are_local() -> None:
    judge = LocalJudge()
    case = load_cases()[0]
    first = await judge.judge(case["question"], case["contexts"], reference_kind="output", reference=case["answer"])
    second = await judge.judge(case["question"], case["contexts"], reference_kind="output", reference=case["answer"])
    assert first.verdicts == second.verdicts
    assert all(v.reason.startswith("local judge: ") for v in first.verdicts)
    assert first.usage.calls == 0 and first.usage.prompt_tokens == 0

async def test_numbers_and_answer_specific_words_decide() -> None:
    judge = LocalJudge()
    outcome = await judge.judge(
        "How tall is the Eiffel Tower?",
        ["The Eiffel Tower stands 330 metres tall.", "The Eiffel Tower was built by Gustave Eiffel's company."],
        reference_kind="output",
        reference="The Eiffel Tower is 330 metres tall.",
    )
    # Echoing the query's words (Eiffel, Tower) is on topic but does not support the answer.
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "330" in outcome.verdicts[0].reason

async def test_query_only_reference() -> None:
    outcome = await LocalJudge().judge(
        "symptoms of vitamin D deficiency",
        ["Vitamin D deficiency symptoms include bone pain.", "Parking is free on Sundays."],
        reference_kind="query",
        reference="",
    )
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "only the query was compared" in outcome.verdicts[0].reason

def test_stemming_and_terms() -> None:
    assert stem("produces") == stem("produced") == stem("producing") == stem("produce")
    assert stem("batteries") == stem("battery")
    t = terms("Costs rose to 7,500 dollars, said Alice.")
    assert "7500" in t.words and "7500" in t.salient and "alic" in t.salient
    assert "the" not in terms("the a of").words

def test_local_scorer_needs_no_network() -> None:
    # A socket guard in a child process: any connection attempt would raise.
    code = (
        "import socket\n"
        "def refuse(*a, **k):\n    raise RuntimeError('network used')\n"
        "socket.socket.connect = refuse\nsocket.create_connection = refuse\n"
        "from ctxprec.scorer import create_context_precision_scorer\n"
        "s = create_context_precision_scorer(context=['Insulin lowers blood sugar.', 'Cats purr.'])\n"
        "r = s.run_sync('What does insulin do?', 'Insulin lowers blood sugar.')\n"
        "print(r.score, r.verdicts[0].relevant, r.verdicts[1].relevant)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1.0", "True", "False"]
