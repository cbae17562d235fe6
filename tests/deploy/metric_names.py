"""Which metric names a PromQL expression uses, and which names the sidecar and the recording
rules actually provide (from collector/metrics/registry.py, the single source of metric names)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from ctxprec.collector.metrics.registry import Metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules"

_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
             "bool", "offset", "inf", "nan", "atan2"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")


def referenced_metrics(expr: str) -> set[str]:
    """Metric (or recorded series) names in a PromQL expression."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGES.sub("", text)
    text = _GROUPING.sub(" ", text)
    return {name for name in _IDENT.findall(text) if name.lower() not in _KEYWORDS}


def exposed_sample_names() -> set[str]:
    """Every series name a sidecar's /metrics can carry (counters get _total, histograms
    _bucket/_sum/_count), from the metric objects themselves."""
    names: set[str] = set()
    for family in Metrics().registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}_{s}" for s in ("bucket", "sum", "count"))
        else:
            names.add(family.name)
    return names


def recorded_names() -> set[str]:
    names: set[str] = set()
    for path in RULES.glob("*.yml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            names.update(r["record"] for r in group["rules"] if "record" in r)
    return names
