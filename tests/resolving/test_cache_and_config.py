"""The resolver's text cache (bounded in bytes, least recently used out first, a TTL) and its
settings: what `resolver` takes, and what it refuses, naming the key and never a secret."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from ctxprec.collector import config as config_module
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.resolving.cache import TextCache
from ctxprec.collector.resolving.config import ResolverConfig
from ctxprec.collector.resolving.stage import DocumentResolver


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_cache_keeps_the_most_recently_used_texts_within_its_bytes() -> None:
    cache = TextCache(max_bytes=100, ttl_s=60)
    cache.put("kb", "a", "x" * 40)
    cache.put("kb", "b", "y" * 40)
    assert cache.get("kb", "a") == "x" * 40  # a is now the most recently used
    cache.put("kb", "c", "z" * 40)  # over 100 bytes: b, the least recently used, goes
    assert cache.get("kb", "b") is None and cache.get("kb", "a") and cache.get("kb", "c")
    assert cache.bytes <= 100 and len(cache) == 2
    cache.put("kb", "huge", "h" * 500)  # larger than the whole cache: not kept, nothing evicted for it
    assert cache.get("kb", "huge") is None and len(cache) == 2
    cache.put("kb", "a", "short")  # replaced: its bytes counted once
    assert cache.bytes == len("short") + len("a") + len("kb") + 40 + len("c") + len("kb")


def test_cached_texts_expire_after_the_ttl_and_sources_do_not_share_ids() -> None:
    clock = _Clock()
    cache = TextCache(max_bytes=1000, ttl_s=10, clock=clock)
    cache.put("kb", "a", "text of kb")
    cache.put("wiki", "a", "text of wiki")
    assert (cache.get("kb", "a"), cache.get("wiki", "a")) == ("text of kb", "text of wiki")
    clock.now = 10.0
    assert cache.get("kb", "a") is None and cache.get("wiki", "a") is None
    assert cache.bytes == 0 and len(cache) == 0


def _load(tmp_path: Path, resolver: dict[str, Any], *flags: str) -> config_module.ServeConfig:
    path = tmp_path / "ctxprec.yaml"
    path.write_text(yaml.safe_dump({"resolver": resolver}), encoding="utf-8")
    parser = argparse.ArgumentParser()
    config_module.add_arguments(parser)
    return config_module.load(parser.parse_args(["--config", str(path), *flags]), environ={})


POSTGRES = {"name": "kb", "kind": "postgres", "dsn": "postgresql://reader@db:5432/kb",
            "query": "SELECT id, content FROM documents WHERE id = ANY($1)"}


def test_a_resolver_section_loads_each_kind_and_the_flag_switches_required_off(tmp_path: Path) -> None:
    sources = [POSTGRES,
               {"name": "cache", "kind": "redis", "url": "redis://cache:6379/0", "key_template": "doc:{id}",
                "field": "text", "when": {"service.name": ["checkout", "search"]}},
               {"name": "vectors", "kind": "chroma", "url": "http://chroma:8000", "collection": "kb"},
               {"name": "lite", "kind": "milvus", "uri": "http://milvus:19530", "collection": "kb", "text_field": "text",
                "when": {"db.system": "milvus"}, "timeout_s": 0.5, "max_concurrency": 2},
               {"name": "app", "kind": "http", "url": "https://app.internal/documents", "password_file": __file__}]
    config = _load(tmp_path, {"sources": sources, "cache_mb": 8}, "--resolver-required", "off")
    assert [s.kind for s in config.resolver.sources] == ["postgres", "redis", "chroma", "milvus", "http"]
    assert config.resolver.required is False and config.resolver.cache_mb == 8
    assert config.resolver.sources[3].timeout_s == 0.5


@pytest.mark.parametrize(("source", "said"), [
    ({**POSTGRES, "dsn": "postgresql://reader:hunter22@db:5432/kb"}, "holds a password"),
    ({**POSTGRES, "dsn": "host=db user=reader password=hunter22"}, "holds a password"),
    ({**POSTGRES, "query": "SELECT id, content FROM documents WHERE id = 'x'"}, "$1"),
    ({**POSTGRES, "query": "SELECT id, content FROM documents WHERE id = ANY($1) AND tenant = $2"}, "$1"),
    ({"name": "r", "kind": "redis", "url": "redis://:hunter22@cache:6379/0", "key_template": "doc:{id}"},
     "holds a password"),
    ({"name": "r", "kind": "redis", "url": "redis://cache:6379/0", "key_template": "doc"}, "{id}"),
    ({"name": "c", "kind": "chroma", "url": "chroma:8000", "collection": "kb"}, "http://"),
    ({"name": "m", "kind": "mongo", "uri": "mongodb://db"}, "kind"),
    ({**POSTGRES, "password_env": "X", "password_file": "/x"}, "not both"),
    ({**POSTGRES, "timeout_s": 0}, "timeout_s"),
])
def test_a_bad_source_is_refused_naming_the_key_and_never_its_secret(source: dict[str, Any], said: str,
                                                                      tmp_path: Path) -> None:
    with pytest.raises(config_module.ConfigError) as error:
        _load(tmp_path, {"sources": [source]})
    message = str(error.value)
    assert "resolver.sources[0]" in message and said in message
    assert "hunter22" not in message


def test_two_sources_with_one_name_are_refused(tmp_path: Path) -> None:
    with pytest.raises(config_module.ConfigError, match="'kb' is used twice"):
        _load(tmp_path, {"sources": [POSTGRES, {**POSTGRES}]})


def test_a_missing_secret_is_refused_at_construction_naming_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KB_DB_PASSWORD", raising=False)
    config = ResolverConfig.model_validate({"sources": [{**POSTGRES, "password_env": "KB_DB_PASSWORD"}]})
    with pytest.raises(ValueError, match="resolver source kb: the variable KB_DB_PASSWORD is not set"):
        DocumentResolver(config, downstream=None, decisions=None, metrics=Metrics())  # type: ignore[arg-type]


def test_the_documented_examples_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/FORMATS.md's resolver example (one source per kind) and its query-only mapping load as
    written, and the stage builds from them."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "FORMATS.md").read_text(encoding="utf-8")
    section = text.split("### Traces without document text", 1)[1]
    blocks = [yaml.safe_load(b.split("```", 1)[0]) for b in section.split("```yaml\n")[1:]]
    mapping, resolver = blocks[0], blocks[1]
    path = tmp_path / "ctxprec.yaml"
    path.write_text(yaml.safe_dump({**mapping, **resolver}), encoding="utf-8")
    parser = argparse.ArgumentParser()
    config_module.add_arguments(parser)
    config = config_module.load(parser.parse_args(["--config", str(path)]), environ={})
    assert [s.kind for s in config.resolver.sources] == ["postgres", "redis", "chroma", "milvus", "http"]
    assert [r.name for r in config.conventions.rules()][0] == "question"
    monkeypatch.setenv("KB_DB_PASSWORD", "secret")
    monkeypatch.setattr("ctxprec.collector.resolving.config.read_token_file", lambda path, what: "token")
    stage = DocumentResolver(config.resolver, downstream=None, decisions=None)  # type: ignore[arg-type]
    assert [s.name for s in stage.sources] == ["kb", "cache", "vectors", "milvus", "app"]
