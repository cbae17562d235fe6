"""The canary's rule and its parts, in process: the baseline's measured variation sets how many
verdicts may move; a round past it says changed; the set's file is read strictly; a new judge
fingerprint starts new drift baselines instead of a drift; the acknowledgement clears the change."""
from __future__ import annotations

import json
import random

import pytest

from ctxprec.collector.canary.config import CanaryConfig
from ctxprec.collector.canary.detector import allowed_moves, binomial_tail, take_baseline
from ctxprec.collector.canary.samples import CanaryFileError, load_canary
from ctxprec.collector.canary.watch import JudgeChange, JudgeWatch
from ctxprec.collector.metrics.drift import DriftConfig, DriftMonitor
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.stub_judge import content_words, flipped, judge_context


def test_binomial_tail_matches_a_direct_sum() -> None:
    from math import comb
    n, p = 20, 0.1
    for k in range(-1, 21):
        direct = sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1, n + 1))
        assert binomial_tail(n, p, k) == pytest.approx(direct, abs=1e-12)


def test_more_variation_at_the_baseline_allows_more_moves() -> None:
    allowed = [allowed_moves(150, (d + 0.5) / 301, 0.001) for d in (0, 3, 6, 12)]
    assert allowed == sorted(allowed) and allowed[0] < allowed[-1]
    # What is allowed is passed by an unchanged judge with at most the false alarm rate.
    for d, k in zip((0, 3, 6, 12), allowed):
        assert binomial_tail(150, (d + 0.5) / 301, k) <= 0.001 < binomial_tail(150, (d + 0.5) / 301, k - 1)


def test_a_round_past_the_allowance_says_changed_and_unstable_contexts_are_left_out() -> None:
    rng = random.Random(3)
    first = [tuple(rng.random() < 0.5 for _ in range(5)) for _ in range(30)]
    second = [list(s) for s in first]
    second[0][0] = not second[0][0]  # one context the judge itself is unsure of
    baseline = take_baseline(first, [tuple(s) for s in second], fingerprint="cp-a", false_alarm_rate=0.001,
                             taken_at=0.0, known=first)
    assert baseline.disagreements == 1 and baseline.stable == 149 and baseline.known_agreement == 1.0
    # The unsure context moving again is not counted; a few moves stay within the allowance.
    same = [list(s) for s in first]
    same[0][0] = not same[0][0]
    assert baseline.compare(same).moved == [] and not baseline.compare(same).changed
    # A change: a fifth of the verdicts turned around.
    changed = [list(s) for s in first]
    for s in range(30):
        changed[s][1] = not changed[s][1]
    result = baseline.compare(changed)
    assert len(result.moved) == 30 and result.changed and "30 of 149" in result.words()


def test_the_shipped_set_is_judged_as_it_says_by_the_stub_rule() -> None:
    samples = load_canary(None)
    assert len(samples) >= 20
    for sample in samples:
        reference = content_words(sample.output or sample.query)
        assert tuple(judge_context(c, reference)[0] for c in sample.contexts) == sample.relevant


def test_a_bad_canary_file_names_every_bad_line(tmp_path) -> None:
    path = tmp_path / "canary.jsonl"
    good = {"query": "q", "contexts": ["a", "b"], "relevant": [True, False]}
    path.write_text("\n".join([json.dumps(good), "{not json", json.dumps({**good, "relevant": [True]}),
                               json.dumps({"contexts": ["a"], "relevant": [True]})]) + "\n")
    with pytest.raises(CanaryFileError) as error:
        load_canary(str(path))
    message = str(error.value)
    assert "line 2: not valid JSON" in message and "line 3: 'relevant' has 1 values for 2 contexts" in message
    assert "line 4: missing required field 'query'" in message and "line 1" not in message


def test_the_interval_is_at_least_five_seconds_and_local_judges_have_no_canary_by_default() -> None:
    assert CanaryConfig(interval_s=5).interval_s == 5
    with pytest.raises(ValueError, match="at least 5"):
        CanaryConfig(interval_s=4.9)
    assert not CanaryConfig().enabled("local") and CanaryConfig().enabled("openai/gpt-4o-mini")
    assert CanaryConfig(mode="on").enabled("local") and not CanaryConfig(mode="off").enabled("openai/x")


def test_the_stub_flips_the_same_share_of_contexts_every_time() -> None:
    texts = [f"context number {i}" for i in range(4000)]
    picked = [t for t in texts if flipped(t, 0.2, "s")]
    assert 0.17 < len(picked) / len(texts) < 0.23
    assert picked == [t for t in texts if flipped(t, 0.2, "s")]
    assert picked != [t for t in texts if flipped(t, 0.2, "other salt")]


def test_a_new_fingerprint_starts_new_drift_baselines_instead_of_a_drift() -> None:
    metrics = Metrics()
    drift = DriftMonitor(metrics, DriftConfig(warmup=12, batch=4, threshold=4.0))
    watch = JudgeWatch(metrics, window_s=600, clock=lambda: 1000.0,
                       on_new_fingerprint=lambda before, after: drift.new_baseline(f"{before} -> {after}"))
    for _ in range(40):
        drift.update("svc", 1.0)
    watch.report(JudgeChange(1000.0, "fingerprint", "fingerprint cp-a -> cp-b", "cp-a", "cp-b"))
    # The new judge scores on another scale: lower from its first score, and never an alarm.
    for _ in range(60):
        assert drift.update("svc", 0.4) is False
    assert metrics.judge_changed._value.get() == 1
    # Without the new baseline the same scores are a drift.
    other = DriftMonitor(None, DriftConfig(warmup=12, batch=4, threshold=4.0))
    for _ in range(40):
        other.update("svc", 1.0)
    assert any(other.update("svc", 0.4) for _ in range(60))


def test_drift_words_within_the_window_only_and_acknowledgement_clears_the_gauge() -> None:
    metrics = Metrics()
    watch = JudgeWatch(metrics, window_s=600, clock=lambda: 5000.0)
    assert watch.drift_words(5000.0) is None
    watch.report(JudgeChange(5000.0, "answers", "the same fingerprint cp-a answers differently", "cp-a", "cp-a"))
    assert "judge changed" in (watch.drift_words(5000.0 - 600) or "")
    assert "judge changed" in (watch.drift_words(5000.0 + 600) or "")
    assert watch.drift_words(5000.0 + 601) is None and watch.drift_words(5000.0 - 601) is None
    assert metrics.judge_changed._value.get() == 1
    watch.cleared("acknowledged")
    assert metrics.judge_changed._value.get() == 0 and not watch.changed
    # A drift raised soon after is still the judge's: the change itself is not forgotten.
    assert watch.drift_words(5100.0) is not None
