"""`--forward-header NAME=VALUE` and `OTEL_EXPORTER_OTLP_HEADERS`: the OTLP exports carry them (so
spans can go through ctxprec to a backend that wants credentials), values can come from the
environment or a file, and no value ever shows in a log line, an error or a repr."""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest
from ctxprec.collector import config as config_module
from ctxprec.collector.config import ConfigError
from ctxprec.collector.exporters.headers import (
    export_headers,
    otel_env_headers,
    parse_forward_headers,
)
from ctxprec.collector.stub_judge import StubJudge

from tests.collector.rag_app import RagApp, running, serve_config, wait_until
from tests.helpers.otlp_capture import OtlpCapture

SECRET = "sk-lf-SECRET-7f3a"


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    config_module.add_arguments(parser)
    return parser.parse_args(list(flags))


def test_values_come_literally_from_the_environment_or_from_a_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(f"Bearer {SECRET}\n")
    env = {"LF_AUTH": "Basic abc=", "OTHER": "x"}
    headers = parse_forward_headers(
        ["x-literal=a b=c", "x-env=$LF_AUTH", "x-braced=${OTHER}", f"Authorization=@{token}",
         "x-dollar=\\$5", "x-at=\\@home", "x-inside=Bearer ${OTHER}-$OTHER"], environ=env)
    assert dict(headers) == {"x-literal": "a b=c", "x-env": "Basic abc=", "x-braced": "x",
                             "Authorization": f"Bearer {SECRET}", "x-dollar": "$5", "x-at": "@home",
                             "x-inside": "Bearer x-x"}
    # A mapping (YAML) and comma-separated text (the environment variable) say the same.
    assert parse_forward_headers({"x-a": "1", "x-b": "$OTHER"}, environ=env) == (("x-a", "1"), ("x-b", "x"))
    assert parse_forward_headers("x-a=1, x-b=$OTHER", environ=env) == (("x-a", "1"), ("x-b", "x"))
    # The same name twice (any case): the later wins.
    assert parse_forward_headers(["X-A=1", "x-a=2"], environ={}) == (("x-a", "2"),)


@pytest.mark.parametrize(("item", "message"), [
    ("Authorization=$NOT_SET_ANYWHERE", "header Authorization: environment variable NOT_SET_ANYWHERE is not set"),
    ("Authorization=@/nonexistent/token", "header Authorization: cannot read /nonexistent/token"),
    ("Authorization=costs $5", "header Authorization: $ must be followed by an environment variable name"),
    ("bad name=x", "header name 'bad name' is not a valid HTTP header name"),
    ("no-equals-sign", "must be NAME=VALUE"),
])
def test_bad_headers_are_refused_naming_the_header_not_the_value(item: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_forward_headers([item], environ={})
    assert message in str(info.value)


def test_a_line_break_in_a_value_is_refused_without_showing_it(tmp_path: Path) -> None:
    path = tmp_path / "two-lines"
    path.write_text(f"{SECRET}\ninjected: yes\n")
    with pytest.raises(ValueError) as info:
        parse_forward_headers([f"Authorization=@{path}"], environ={})
    assert "line break" in str(info.value) and SECRET not in str(info.value)


def test_otel_environment_headers_follow_the_specification() -> None:
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "api-key=key%20one,x-team = search , broken, =novalue",
           "OTEL_EXPORTER_OTLP_LOGS_HEADERS": "x-logs=1", "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x-metrics=2"}
    assert otel_env_headers("traces", env) == {"api-key": "key one", "x-team": "search"}
    assert otel_env_headers("logs", env) == {"x-logs": "1"}  # the signal's own variable replaces the shared one
    assert otel_env_headers("metrics", env) == {"x-metrics": "2"}
    # --forward-header wins for a name given in both, whatever its case.
    assert export_headers((("API-Key", "mine"),), "traces", env) == {"api-key": "mine", "x-team": "search"}


def test_flags_env_and_file_layer_as_for_every_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LF_AUTH_TEST", SECRET)
    path = tmp_path / "ctxprec.yaml"
    path.write_text("export:\n  forward_headers:\n    x-from: file\n  sinks:\n    - phoenix=http://phoenix:6006\n"
                    "    - langfuse: https://cloud.langfuse.com/\n")
    c = config_module.load(parse("--config", str(path)), environ={})
    assert c.export.forward_headers == (("x-from", "file"),)
    assert [str(s) for s in c.export.sinks] == ["phoenix=http://phoenix:6006", "langfuse=https://cloud.langfuse.com"]
    env = {"CTXPREC_FORWARD_HEADER": "x-from=env,authorization=$LF_AUTH_TEST",
           "CTXPREC_SINK": "phoenix=http://a:6006 langfuse=http://b:3000"}
    c = config_module.load(parse("--config", str(path)), environ=env)
    assert dict(c.export.forward_headers) == {"x-from": "env", "authorization": SECRET}
    assert [s.url for s in c.export.sinks] == ["http://a:6006", "http://b:3000"]
    # Repeated flags make the list, and replace the environment's (flags win).
    c = config_module.load(parse("--config", str(path), "--forward-header", "x-1=a", "--forward-header", "x-2=b",
                                 "--sink", "phoenix=http://c:6006"), environ=env)
    assert c.export.forward_headers == (("x-1", "a"), ("x-2", "b"))
    assert [str(s) for s in c.export.sinks] == ["phoenix=http://c:6006"]
    assert SECRET not in repr(c)


@pytest.mark.parametrize(("flags", "message"), [
    (("--sink", "zipkin=http://z:9411"), "config key export.sinks (from --sink): unknown sink 'zipkin'"),
    (("--sink", "phoenix"), "config key export.sinks (from --sink): must be KIND=URL"),
    (("--sink", "phoenix=ftp://p"), "phoenix: must be an http:// or https:// URL"),
    (("--sink", f"langfuse=https://pk:{SECRET}@cloud.langfuse.com"), "put no credentials in the URL"),
    (("--sink", "phoenix=http://p:6006", "--sink", "phoenix=http://p:6006/"), "is given twice"),
    (("--forward-header", "authorization=$CTXPREC_TEST_UNSET"),
     "config key export.forward_headers (from --forward-header): header authorization: environment variable"),
])
def test_bad_sinks_and_headers_name_the_key(flags: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_module.load(parse(*flags), environ={})
    assert message in str(info.value)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(("write_back", "downstream"), [("span", "http"), ("evaluator", "grpc")])
async def test_every_otlp_export_carries_the_headers_and_no_log_line_shows_a_value(
        write_back: str, downstream: str, stub_judge: StubJudge, capture: OtlpCapture, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    token = tmp_path / "token"
    token.write_text(f"Bearer {SECRET}\n")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme,authorization=from-otel-env")
    monkeypatch.setenv("LF_PROJECT_TEST", "proj-9")
    caplog.set_level(logging.DEBUG)
    url = capture.http_url if downstream == "http" else capture.grpc_url
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", stub_judge.url, "--judge-api-key", "k",
                          "--forward-to", url, "--write-back", write_back,
                          "--forward-header", f"Authorization=@{token}",
                          "--forward-header", "x-project=$LF_PROJECT_TEST")
    async with running(config) as pipeline:
        app = RagApp(protocol="http", port=pipeline.otlp_http_port or 0, service="shop")
        app.openinference("what is the return policy?", ["Returns within 30 days.", "Shipping is free."],
                          "Returns are accepted within 30 days.")
        await app.flush()
        await app.close()
        await wait_until(lambda: bool(capture.find_spans("gen_ai.evaluation.name", "context_precision")),
                         timeout=20, what="the scored span or evaluator span downstream")
    assert capture.headers
    for headers in capture.headers:
        assert headers["authorization"] == f"Bearer {SECRET}"  # --forward-header wins over the OTel variable
        assert headers["x-tenant"] == "acme" and headers["x-project"] == "proj-9"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "headers Authorization, x-project" in logged  # names only
    assert SECRET not in logged and "proj-9" not in logged and "from-otel-env" not in logged
