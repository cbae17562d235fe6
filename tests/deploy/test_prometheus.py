"""deploy/prometheus: the config and rules pass promtool, every alert's unit tests pass (each
alert has a test that fires it and one that keeps it quiet), and the rules only use metrics the
sidecar exposes."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

import pytest

from tests.deploy.metric_names import (
    exposed_sample_names,
    recorded_names,
    referenced_metrics,
)

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
PROMTOOL = "/usr/bin/promtool"


def _promtool(*args: str, cwd: Path = PROM) -> subprocess.CompletedProcess[str]:
    assert Path(PROMTOOL).exists(), "promtool missing: `make system-deps` installs Debian's prometheus package"
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _alerts() -> list[dict]:
    rules = yaml.safe_load((PROM / "rules" / "ctxprec-alerts.yml").read_text())
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_config() -> None:
    done = _promtool("check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 rule files found" in done.stdout + done.stderr


def test_promtool_check_rules() -> None:
    files = sorted(str(p.relative_to(PROM)) for p in (PROM / "rules").glob("*.yml"))
    done = _promtool("check", "rules", *files)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_promtool_unit_tests_pass() -> None:
    tests = sorted(str(p.relative_to(PROM)) for p in (PROM / "tests").glob("*_test.yml"))
    assert tests
    done = _promtool("test", "rules", *tests)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in (PROM / "tests").glob("*_test.yml"):
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert names == fired, f"alerts without a firing test: {sorted(names - fired)}"
    assert names == quiet, f"alerts without a quiet test: {sorted(names - quiet)}"


def test_a_wrong_expectation_fails_promtool(tmp_path: Path) -> None:
    """The unit tests can fail: flip one expected label and promtool must report it."""
    source = (PROM / "tests" / "operations_alerts_test.yml").read_text()
    mutated = source.replace("exp_labels: {severity: warning, service: support-bot}",
                             "exp_labels: {severity: critical, service: support-bot}", 1)
    assert mutated != source
    mutated = mutated.replace("../rules/", str(PROM / "rules") + "/")
    (tmp_path / "mutated_test.yml").write_text(mutated)
    done = _promtool("test", "rules", "mutated_test.yml", cwd=tmp_path)
    assert done.returncode != 0
    assert "CtxprecPrecisionDrift" in done.stdout + done.stderr


def test_rules_only_use_exposed_metrics() -> None:
    exposed = exposed_sample_names()
    recorded = recorded_names()
    for path in (PROM / "rules").glob("*.yml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                for name in referenced_metrics(rule["expr"]):
                    assert name in exposed or name in recorded or name == "ALERTS", (
                        f"{path.name}: {rule.get('record') or rule.get('alert')} uses unknown metric {name}")


def test_alerts_carry_severity_and_summary() -> None:
    for alert in _alerts():
        assert alert["labels"]["severity"] in ("warning", "critical"), alert["alert"]
        assert alert["annotations"]["summary"] and alert["annotations"]["description"], alert["alert"]
        assert re.fullmatch(r"\d+[smh]", alert["for"]), alert["alert"]
