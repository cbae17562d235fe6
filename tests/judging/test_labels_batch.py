"""`ctxprec score --labels` and `ctxprec report --labels`: the console script in its own process,
the stub judge over real HTTP; the agreement they state is the test's own count over the same
labels and the verdicts the stub gives (its markers)."""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.agreement import Confusion

from tests.scorer.test_batch_cli import ctxprec, judge_args

pytestmark = pytest.mark.slow


def _events_and_labels(tmp_path: Path) -> tuple[Path, Path, Confusion, int]:
    rng = random.Random(3)
    events, labels, expected = [], [], Confusion()
    for k in range(40):
        verdicts = [rng.random() < 0.5 for _ in range(rng.randint(1, 4))]
        trace_id, span_id = f"{k + 1:032x}", f"{k + 1:016x}"
        events.append({"trace_id": trace_id, "span_id": span_id, "query": f"question {k}",
                       "contexts": [("[relevant] " if v else "[irrelevant] ") + f"passage {k}-{i}"
                                    for i, v in enumerate(verdicts)]})
        if k % 4 == 3:
            continue  # not labelled
        human = [v if rng.random() < 0.8 else not v for v in verdicts]
        if k % 5 == 0:  # one context at a time
            for i, h in enumerate(human):
                labels.append({"trace_id": trace_id, "span_id": span_id, "context_index": i, "relevant": h,
                               "annotator": "ana"})
        else:
            labels.append({"trace_id": trace_id, "span_id": span_id, "relevant": human})
        for said, truth in zip(verdicts, human):
            expected.add(said, truth)
    events_path, labels_path = tmp_path / "events.jsonl", tmp_path / "labels.jsonl"
    events_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    lines = [json.dumps(label) for label in labels]
    lines.insert(3, "{broken")  # line 4
    lines.append(json.dumps({"trace_id": "f" * 32, "span_id": "f" * 16, "relevant": [True, False]}))
    labels_path.write_text("\n".join(lines) + "\n")
    return events_path, labels_path, expected, len(lines)


async def test_score_and_report_with_labels(stub_judge: StubJudge, tmp_path: Path) -> None:
    events, labels, expected, _ = _events_and_labels(tmp_path)
    scores = tmp_path / "scores.jsonl"
    done = await ctxprec("score", str(events), "-o", str(scores), "--labels", str(labels), *judge_args(stub_judge))
    assert done.rc == 0, done.stderr
    line = next(x for x in done.stderr.splitlines() if "labelled contexts" in x)
    figures = dict(re.findall(r"(agreement|kappa|precision|recall) (-?[0-9.]+)", line))
    assert f"{expected.total} labelled contexts" in line
    assert float(figures["agreement"]) == pytest.approx(expected.agreement, abs=5e-4)
    assert float(figures["kappa"]) == pytest.approx(expected.kappa, abs=5e-4)
    assert float(figures["precision"]) == pytest.approx(expected.precision, abs=5e-4)
    assert float(figures["recall"]) == pytest.approx(expected.recall, abs=5e-4)
    low, high = expected.kappa_interval()
    assert f"(95% {low:.3f} to {high:.3f})" in line
    assert (f"yes/yes {expected.both_relevant}, yes/no {expected.judge_only}, no/yes {expected.reference_only}, "
            f"no/no {expected.both_irrelevant}") in line
    assert "2 labelled contexts of retrievals not scored here" in done.stderr
    assert "1 lines refused (first: line 4: not valid JSON" in done.stderr

    report = tmp_path / "report.html"
    done = await ctxprec("report", str(scores), "-o", str(report), "--labels", str(labels))
    assert done.rc == 0, done.stderr
    html = report.read_text()
    section = html[html.index('id="judge-agreement"'):]
    section = section[:section.index("</section>")]
    assert "How far to trust the judge" in section and "openai/stub" in section
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", section)
    assert str(expected.total) in cells
    assert f"{expected.kappa:.3f}" in cells and f"{low:.2f} to {high:.2f}" in cells
    assert (f"{expected.both_relevant} / {expected.judge_only} / {expected.reference_only} / "
            f"{expected.both_irrelevant}") in cells

    missing = await ctxprec("report", str(scores), "-o", str(report), "--labels", str(tmp_path / "nope.jsonl"))
    assert missing.rc == 2 and "--labels" in missing.stderr and "no such file" in missing.stderr
    missing = await ctxprec("score", str(events), "--labels", str(tmp_path / "nope.jsonl"), *judge_args(stub_judge))
    assert missing.rc == 2 and "--labels" in missing.stderr
