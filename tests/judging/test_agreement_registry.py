"""The judge agreement registry: the numbers it publishes (metrics and /diagnostics/judge) are
those of the test's own count of the same pairs; other components can add sections."""
from __future__ import annotations

import random

import pytest
from prometheus_client import generate_latest

from ctxprec.collector.judging.agreement import JudgeAgreement
from ctxprec.collector.metrics.registry import Metrics


def _sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def _own_kappa(pairs: list[tuple[bool, bool]]) -> tuple[float, float]:
    n = len(pairs)
    po = sum(a == b for a, b in pairs) / n
    judge_yes = sum(a for a, _ in pairs) / n
    ref_yes = sum(b for _, b in pairs) / n
    pe = judge_yes * ref_yes + (1 - judge_yes) * (1 - ref_yes)
    return po, (po - pe) / (1 - pe)


def test_agreement_is_published_as_metrics_and_view() -> None:
    metrics = Metrics()
    registry = JudgeAgreement(metrics, kappa_alert=0.4)
    registry.describe("cp-0123456789abcdef", model="openai/gpt-4o-mini", prompt_version="v3", role="live")
    rng = random.Random(7)
    pairs: list[tuple[bool, bool]] = []
    for _ in range(30):
        k = rng.randint(1, 5)
        truth = [rng.random() < 0.5 for _ in range(k)]
        said = [t if rng.random() < 0.8 else not t for t in truth]
        registry.add("cp-0123456789abcdef", "human", said, truth, annotator="ana")
        pairs.extend(zip(said, truth))
    po, kappa = _own_kappa(pairs)
    labels = {"judge": "cp-0123456789abcdef", "against": "human"}
    assert _sample(metrics, "ctxprec_judge_labels_total", **labels) == len(pairs)
    assert _sample(metrics, "ctxprec_judge_agreement_ratio", **labels) == pytest.approx(po)
    assert _sample(metrics, "ctxprec_judge_kappa", **labels) == pytest.approx(kappa)
    low = _sample(metrics, "ctxprec_judge_kappa_lower", **labels)
    high = _sample(metrics, "ctxprec_judge_kappa_upper", **labels)
    assert low is not None and high is not None and low < kappa < high
    assert _sample(metrics, "ctxprec_judge_info", judge="cp-0123456789abcdef", model="openai/gpt-4o-mini",
                   prompt_version="v3", role="live") == 1

    reply = registry.view({})
    assert reply.status == 200
    (entry,) = reply.body["agreement"]
    assert entry["contexts"] == len(pairs)
    assert entry["agreement"] == pytest.approx(po, abs=1e-4)
    assert entry["kappa"] == pytest.approx(kappa, abs=1e-4)
    tp = sum(a and b for a, b in pairs)
    assert entry["confusion"]["both_relevant"] == tp
    assert entry["precision"] == pytest.approx(tp / sum(a for a, _ in pairs), abs=1e-4)
    assert entry["recall"] == pytest.approx(tp / sum(b for _, b in pairs), abs=1e-4)
    assert entry["annotators"] == ["ana"]
    assert reply.body["judges"][0]["role"] == "live"
    assert registry.view({"against": "live"}).body["agreement"] == []
    assert registry.view({"against": "robots"}).status == 400


def test_sections_from_other_components_are_served_and_isolated() -> None:
    registry = JudgeAgreement()
    registry.add_section("canary", lambda: {"changed": False})

    def broken() -> dict:
        raise RuntimeError("boom")

    registry.add_section("shadow", broken)
    body = registry.view({}).body
    assert body["sections"]["canary"] == {"changed": False}
    assert "boom" in body["sections"]["shadow"]["error"]
    with pytest.raises(ValueError):
        registry.add_section("agreement", dict)


def test_mismatched_lengths_and_unknown_against_are_refused() -> None:
    registry = JudgeAgreement(Metrics())
    with pytest.raises(ValueError, match="2 verdicts against 1"):
        registry.add("cp-x", "human", [True, False], [True])
    with pytest.raises(ValueError, match="against"):
        registry.add("cp-x", "people", [True], [True])
    registry.count_unmatched("evicted", 3)
    assert registry.view({}).body["unmatched_labels"] == {"evicted": 3}
    assert b'ctxprec_judge_labels_unmatched_total{reason="evicted"} 3.0' in generate_latest(registry.metrics.registry)
