"""dashboards/: the JSON files match their generator, every panel has a datasource and queries,
variables are defined and used, every metric a query names exists, and the provisioning files
point where compose mounts the dashboards."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import generate
from tests.deploy.metric_names import (
    exposed_sample_names,
    recorded_names,
    referenced_metrics,
)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
BUILTIN_VARS = {"__rate_interval", "__range", "__interval", "__all"}


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def test_json_files_match_the_generator() -> None:
    assert [p.name for p in DASHBOARDS] == sorted(generate.DASHBOARDS)
    assert generate.main(["--check"]) == 0, "run: .venv/bin/python -m dashboards.generate"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_model_is_sane(path: Path) -> None:
    dashboard = _load(path)
    assert dashboard["schemaVersion"] >= 39
    assert dashboard["uid"] and len(dashboard["uid"]) <= 40
    variables = _variables(dashboard)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["service"]["type"] == "query"
    assert "label_values(" in variables["service"]["definition"]
    if "retriever" in variables:
        assert "label_values(" in variables["retriever"]["definition"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        where = f"{path.name}: panel {panel['title']!r}"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        assert panel["targets"], where
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["w"] > 0 and grid["h"] > 0, where
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), where
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", where
            assert target["expr"].strip(), where
            for used in re.findall(r"\$(\w+)", target["expr"]):
                assert used in variables or used in BUILTIN_VARS, f"{where}: undefined variable ${used}"
        if panel["type"] == "heatmap":
            assert all(t["format"] == "heatmap" for t in panel["targets"]), where
            assert all("_bucket" in t["expr"] and "by (le)" in t["expr"] for t in panel["targets"]), where


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_query_names_a_real_metric(path: Path) -> None:
    known = exposed_sample_names() | recorded_names() | {"ALERTS"}
    dashboard = _load(path)
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queries += [v["definition"] for v in _variables(dashboard).values() if v["type"] == "query"]
    assert queries, f"{path.name}: no queries"
    for expr in queries:
        names = referenced_metrics(re.sub(r"label_values\((.*),\s*\w+\)", r"\1", expr))
        assert names, f"{path.name}: no metric in {expr!r}"
        unknown = names - known
        assert not unknown, f"{path.name}: unknown metrics {sorted(unknown)} in {expr!r}"


def test_dashboards_cover_the_spec_panels() -> None:
    exprs = {p.stem: " ".join(t["expr"] for panel in _load(p)["panels"] for t in panel["targets"]) for p in DASHBOARDS}
    overview, retrieval, health = exprs["ctxprec-overview"], exprs["ctxprec-retrieval"], exprs["ctxprec-scorer-health"]
    assert "mean7d" in overview and "ctxprec_context_precision_bucket" in overview
    assert "ctxprec_precision_drift" in overview and "ALERTS" in overview
    assert "ctxprec_rank_judged_total" in retrieval and "precision_at_k" in retrieval and "hit" in retrieval
    assert "ctxprec_recommended_k{" in retrieval and "ctxprec_recommended_k_saved_tokens" in retrieval
    assert "ctxprec_sample_rate" in health
    for metric in ("ctxprec_samples_total", "ctxprec_judge_latency_seconds_bucket", "ctxprec_judge_tokens_total",
                   "ctxprec_judge_cost_usd_total", "ctxprec_queue_depth", "ctxprec_traces_buffered",
                   "ctxprec_kafka_consumer_lag"):
        assert metric in health, metric


def test_metric_check_catches_a_typo() -> None:
    known = exposed_sample_names() | recorded_names()
    assert referenced_metrics('sum(rate(ctxprec_sample_total{service=~"$service"}[5m]))') - known == {"ctxprec_sample_total"}


def test_provisioning_matches_compose_mounts() -> None:
    provider = yaml.safe_load((ROOT / "dashboards/provisioning/dashboards/ctxprec.yaml").read_text())["providers"][0]
    datasource = yaml.safe_load((ROOT / "dashboards/provisioning/datasources/prometheus.yaml").read_text())["datasources"][0]
    assert datasource["type"] == "prometheus"
    grafana = yaml.safe_load((ROOT / "deploy/compose.yaml").read_text())["services"]["grafana"]
    mounts = {m.split(":")[1]: (ROOT / "deploy" / m.split(":")[0]).resolve() for m in grafana["volumes"] if m.startswith(".")}
    assert mounts[provider["options"]["path"]] == (ROOT / "dashboards").resolve()
    assert mounts["/etc/grafana/provisioning/dashboards"] == (ROOT / "dashboards/provisioning/dashboards").resolve()
    assert mounts["/etc/grafana/provisioning/datasources"] == (ROOT / "dashboards/provisioning/datasources").resolve()
    assert datasource["url"].startswith("http://prometheus:")
