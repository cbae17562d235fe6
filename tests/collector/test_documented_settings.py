"""Every setting docs/CONFIG.md documents works as documented, through each of its three ways in:
its YAML key, its flag and its environment variable give the same value, and a value other than
its default. Read from the committed page, not from the code, so that a change that renames or
drops a key, a flag or a variable users know fails here even when the page is regenerated."""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from ctxprec.collector import config as config_module

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "CONFIG.md"
ROW = re.compile(r"^\| `(?P<key>[a-z_]+\.[a-z_.]+)` \| (?:`(?P<flag>--[a-z0-9-]+)`)? *\| "
                 r"(?:`(?P<env>CTXPREC_[A-Z0-9_]+)`)? *\| `(?P<default>[^`]*)` \|")


@dataclass(frozen=True)
class Documented:
    key: str
    flag: str | None
    env: str | None  # neither flag nor variable: a key of the YAML file only
    default: str


def documented() -> list[Documented]:
    rows = [Documented(m["key"], m["flag"], m["env"], m["default"])
            for m in map(ROW.match, PAGE.read_text(encoding="utf-8").splitlines()) if m]
    assert len(rows) > 100, "docs/CONFIG.md's tables were not read"
    return rows


DOCUMENTED = documented()


def files(tmp_path: Path) -> dict[str, str]:
    paths = {}
    for name in ("cert.pem", "key.pem", "ca.pem", "token"):
        path = tmp_path / name
        path.write_text("not read at load\n")
        paths[name] = str(path)
    return paths


# Settings that are only valid beside others (a Kafka key needs Kafka on; a key file its
# certificate; a SASL user a SASL protocol): those others go into the YAML file of every run.
def companions(key: str, paths: dict[str, str]) -> dict[str, Any]:
    section, _, name = key.partition(".")
    out: dict[str, dict[str, Any]] = {}
    if section == "kafka" and name not in ("bootstrap", "topic"):
        out["kafka"] = {"bootstrap": "127.0.0.1:9092", "topic": "spans"}
    elif key == "kafka.bootstrap":
        out["kafka"] = {"topic": "spans"}
    elif key == "kafka.topic":
        out["kafka"] = {"bootstrap": "127.0.0.1:9092"}
    if key in ("kafka.sasl_username", "kafka.sasl_password"):
        out["kafka"].update(security_protocol="SASL_PLAINTEXT", sasl_username="u", sasl_password="p")
    if key == "kafka.security_protocol":
        out["kafka"].update(sasl_username="u", sasl_password="p")
    if key == "kafka.ssl_keyfile":
        out["kafka"]["ssl_certfile"] = paths["cert.pem"]
    if section in ("receivers", "metrics") and name in ("tls_key", "tls_client_ca"):
        out[section] = {"tls_cert": paths["cert.pem"], "tls_key": paths["key.pem"]}
    if section in ("receivers", "metrics") and name == "tls_cert":
        out[section] = {"tls_key": paths["key.pem"]}
    if key in ("export.cert_file", "export.key_file"):
        out["export"] = {"cert_file": paths["cert.pem"], "key_file": paths["key.pem"]}
    if key == "sampling.daily_budget_usd":
        out["judge"] = {"model": "openai/gpt-4o-mini"}
    section_values = out.get(section, {})
    section_values.pop(name, None)  # the key under test is set by the test, one way at a time
    return {k: v for k, v in out.items() if v}


# The YAML-only keys that hold structures, with a value of each.
STRUCTURED: dict[str, Any] = {
    "sampling.rules": [{"service": "checkout-*", "rate": 0.5}],
    "conventions.order": ["genai", "openinference"],
    "conventions.mapping": {"query": "app.question", "contexts": "app.documents$[*].text"},
    "conventions.mappings": [{"name": "step", "when": {"span.name": "retrieve"}, "query": "app.question",
                              "contexts": "app.documents$[*].text"}],
    "conventions.tools.include": ["search_*"],
    "conventions.tools.exclude": ["web_search"],
    "resolver.sources": [{"name": "kb", "kind": "http", "url": "http://127.0.0.1:9/documents"}],
}


def candidates(row: Documented, paths: dict[str, str]) -> list[Any]:
    """Values to try, in order: the first that loads and differs from the default is used."""
    if row.key in STRUCTURED:
        return [STRUCTURED[row.key]]
    setting = next(s for s in config_module.SETTINGS if s.key == row.key)
    if setting.choices:
        return [c for c in setting.choices if c.lower() != row.default.lower()]
    name = row.key.rpartition(".")[2]
    if "file" in name or name in ("tls_cert", "tls_key", "tls_client_ca", "ssl_cafile", "ssl_certfile"):
        return [paths["token"] if "token" in name else paths["cert.pem"]]
    return ["0.25", "0.5", "7", "4096", "20000", "1.5,6", "true", "false", "off", "127.0.0.1:9", "http://127.0.0.1:9",
            "phoenix=http://127.0.0.1:9", "X-Test=1", "127.0.0.1:9092", "redis://127.0.0.1:9/0", "some-value"]


def load(tmp_path: Path, file: dict[str, Any], flags: list[str], env: dict[str, str]) -> Any:
    path = tmp_path / "ctxprec.yaml"
    path.write_text(yaml.safe_dump(file))
    parser = argparse.ArgumentParser()
    config_module.add_arguments(parser)
    return config_module.load(parser.parse_args(["--config", str(path), *flags]), environ=env)


def value_at(config: Any, key: str) -> Any:
    for part in key.split("."):
        config = getattr(config, part)
    return config


def nested(key: str, value: Any) -> dict[str, Any]:
    """`a.b.c` -> {a: {b: {c: value}}} (a block inside a section, such as conventions.tools)."""
    out: Any = value
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


def merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.mark.parametrize("row", DOCUMENTED, ids=[r.key for r in DOCUMENTED])
def test_each_documented_key_flag_and_variable_sets_the_same_value(row: Documented, tmp_path: Path) -> None:
    paths = files(tmp_path)
    base = companions(row.key, paths)
    try:
        default = value_at(load(tmp_path, base, [], {}), row.key)
    except config_module.ConfigError:  # one of a pair that must be given together
        default = object()
    for raw in candidates(row, paths):
        try:
            from_file = value_at(load(tmp_path, merged(base, nested(row.key, raw)), [], {}), row.key)
        except config_module.ConfigError:
            continue
        if from_file != default:
            break
    else:
        pytest.fail(f"{row.key}: no value other than the default ({default!r}) loads from the YAML file")
    if row.env is not None:
        from_env = value_at(load(tmp_path, base, [], {row.env: raw}), row.key)
        assert from_env == from_file, f"{row.env}={raw!r} gave {from_env!r}, the YAML key {from_file!r}"
    if row.flag is not None:
        from_flag = value_at(load(tmp_path, base, [row.flag, raw], {}), row.key)
        assert from_flag == from_file, f"{row.flag} {raw!r} gave {from_flag!r}, the YAML key {from_file!r}"
