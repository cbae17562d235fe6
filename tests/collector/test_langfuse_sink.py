"""`--sink langfuse=URL`. No Langfuse server runs here, so the sink is checked against the
`langfuse` SDK's own models and a local receiver that records every request and answers as told:
the body is what the SDK's `CreateScoreRequest` reads (and what its encoder writes), the scores
carry the trace and the retrieval span as observation, the keys go as HTTP basic auth and
nowhere else, a re-score has the same id and timestamp (Langfuse's upsert), 429 and 5xx are
retried after their Retry-After, and what cannot go is counted as dropped by reason."""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiohttp
import pytest
from aiohttp import web
from ctxprec.collector import config as config_module
from ctxprec.collector import serve as serve_module
from ctxprec.collector.components import shutdown
from ctxprec.collector.exporters.langfuse_scores import score_id
from ctxprec.collector.exporters.sinks import SinkSettings, build_sinks
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision, Outcome, Retrieval, RetrievedContext
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.collector.stub_judge import StubJudge
from langfuse.api import CreateScoreRequest, ScoreDataType
from langfuse.api.core.jsonable_encoder import jsonable_encoder
from langfuse.api.core.pydantic_utilities import parse_obj_as
from langfuse.api.core.serialization import convert_and_respect_annotation_metadata

from tests.collector.rag_app import RagApp, running, serve_config, wait_until
from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.rag_traces import score_of

PUBLIC, SECRET = "pk-lf-test-1234", "sk-lf-SECRET-5678"
IDENTITY = ScorerIdentity(model="openai/stub", prompt_version="v3", annotator_kind="LLM", identifier="fp-1")


@dataclass
class Recorded:
    at: float
    headers: dict[str, str]
    body: Any


@dataclass
class LangfuseReceiver:
    """POST /api/public/scores: records the request, answers with the next scripted (status,
    headers, body), then 202 Accepted as Langfuse does for a batch it took whole."""

    script: list[tuple[int, dict[str, str], Any]] = field(default_factory=list)
    always: tuple[int, dict[str, str], Any] | None = None
    requests: list[Recorded] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    async def start(self) -> "LangfuseReceiver":
        app = web.Application()
        app.router.add_post("/api/public/scores", self._scores)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _scores(self, request: web.Request) -> web.Response:
        self.requests.append(Recorded(time.monotonic(), dict(request.headers), json.loads(await request.read())))
        status, headers, body = self.script.pop(0) if self.script else (self.always or (202, {}, {"message": "Accepted"}))
        return web.json_response(body, status=status, headers=headers)

    @property
    def scores(self) -> list[dict[str, Any]]:
        return [score for r in self.requests for score in r.body]


@pytest.fixture
async def receiver() -> AsyncIterator[LangfuseReceiver]:
    r = await LangfuseReceiver().start()
    try:
        yield r
    finally:
        await r.stop()


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET)
    monkeypatch.delenv("LANGFUSE_TRACING_ENVIRONMENT", raising=False)


def judge(stub: StubJudge) -> list[str]:
    return ["--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k"]


class Outcomes:
    def __init__(self) -> None:
        self.items: list[Outcome] = []

    def emit(self, outcome: Outcome) -> None:
        self.items.append(outcome)


async def test_each_score_is_a_langfuse_score_on_the_retrieval_observation(
        stub_judge: StubJudge, receiver: LangfuseReceiver, keys: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    capture = await OtlpCapture().start()
    outcomes, again = Outcomes(), Outcomes()
    try:
        async with running(serve_config(*judge(stub_judge), "--forward-to", capture.http_url,
                                        "--sink", f"langfuse={receiver.url}")) as pipeline:
            pipeline.add_sink(outcomes)
            app = RagApp(protocol="http", port=pipeline.otlp_http_port or 0, service="shop")
            emitted = [app.openinference(f"question {i}", [f"[relevant] passage {i}", "[irrelevant] filler"], "answer")
                       for i in range(3)]
            await app.flush()
            await app.close()
            await wait_until(lambda: len(receiver.scores) == 3, timeout=20, what="3 scores at the receiver")
            identifier = pipeline.identity.identifier
        # The same spans scored again by another sidecar: same ids, same timestamps (an upsert).
        async with running(serve_config(*judge(stub_judge), "--sink", f"langfuse={receiver.url}")) as second:
            second.add_sink(again)
            async with aiohttp.ClientSession() as session:
                for body in capture.bodies:
                    async with session.post(f"http://127.0.0.1:{second.otlp_http_port}/v1/traces", data=body,
                                            headers={"Content-Type": "application/x-protobuf"}) as response:
                        assert response.status == 200
            await wait_until(lambda: len(receiver.scores) == 6, timeout=20, what="the re-scores")
    finally:
        await capture.stop()

    auth = "Basic " + base64.b64encode(f"{PUBLIC}:{SECRET}".encode()).decode()
    assert all(r.headers["Authorization"] == auth for r in receiver.requests)
    assert all(r.headers["Content-Type"] == "application/json" for r in receiver.requests)
    first, second_scores = receiver.scores[:3], receiver.scores[3:]
    by_span = {o.retrieval.span_id: o for o in outcomes.items}
    for raw in first:
        # The SDK reads it into its own model with nothing left over, and writes that model back
        # to the same JSON: the format is Langfuse's.
        score = parse_obj_as(CreateScoreRequest, raw)
        assert not score.model_extra
        assert jsonable_encoder(convert_and_respect_annotation_metadata(
            object_=score, annotation=CreateScoreRequest, direction="write")) == raw
        assert set(raw) >= {"id", "traceId", "observationId", "name", "value", "comment", "dataType", "timestamp"}
        assert None not in raw.values()
        outcome = by_span[score.observation_id or ""]
        result = outcome.result
        assert result is not None
        span = next(e for e in emitted if e.retriever_span_id == score.observation_id)
        assert score.trace_id == span.trace_id and score.name == "context_precision"
        assert score.value == result.score and score.comment == result.reason
        assert score.data_type == ScoreDataType.NUMERIC
        assert score.id == score_id(span.trace_id, span.retriever_span_id, "context_precision", identifier)
        ended = outcome.retrieval.end_time_unix_nano / 1e9
        assert score.timestamp == datetime.fromtimestamp(ended, tz=timezone.utc)
        assert score.metadata is not None and score.metadata["label"] in ("high", "low")
        assert [v["relevant"] for v in score.metadata["verdicts"]] == [v.relevant for v in result.verdicts]
    assert sorted((s["id"], s["timestamp"]) for s in second_scores) == sorted((s["id"], s["timestamp"]) for s in first)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET not in logged and auth not in logged


def outcome(i: int, relevance: tuple[bool, ...] = (True, False)) -> Outcome:
    retrieval = Retrieval(trace_id=f"{i:032x}", span_id=f"{i + 1:016x}", service="shop", query=f"q{i}",
                          contexts=[RetrievedContext(f"c{j}") for j in range(len(relevance))],
                          end_time_unix_nano=1_700_000_000_000_000_000 + i)
    return Outcome(retrieval, Decision.EVALUATED, score_of(relevance), record={"id": str(i)})


async def sink_with(receiver: LangfuseReceiver, *flags: str) -> tuple[Any, Metrics]:
    parser = argparse.ArgumentParser()
    config_module.add_arguments(parser)
    config = config_module.load(parser.parse_args(["--sink", f"langfuse={receiver.url}", *flags]), environ={})
    metrics = Metrics()
    (sink,) = build_sinks(SinkSettings.of(config.export), IDENTITY, metrics)
    await sink.start()
    return sink, metrics


def dropped(metrics: Metrics, reason: str) -> float:
    return metrics.registry.get_sample_value("ctxprec_export_dropped_total",
                                             {"exporter": "langfuse", "reason": reason}) or 0.0


async def until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    await wait_until(predicate, timeout=timeout)


async def test_429_and_5xx_are_retried_after_their_retry_after_and_nothing_is_lost(
        receiver: LangfuseReceiver, keys: None) -> None:
    receiver.script = [(429, {"Retry-After": "1"}, {"message": "rate limited"}),
                       (503, {}, {"message": "unavailable"}),
                       (502, {"Retry-After": "0.5"}, {"message": "bad gateway"})]
    sink, metrics = await sink_with(receiver)
    for i in range(3):
        sink.emit(outcome(i))
    await until(lambda: len(receiver.requests) == 4)
    await shutdown(sink, 1.0)
    times = [r.at for r in receiver.requests]
    assert times[1] - times[0] >= 1.0  # Retry-After: 1
    assert times[3] - times[2] >= 0.5
    assert all(r.body == receiver.requests[0].body for r in receiver.requests)  # the same batch each time
    assert len(receiver.requests[0].body) == 3
    assert metrics.registry.get_sample_value("ctxprec_exported_spans_total",
                                             {"exporter": "langfuse", "outcome": "ok"}) == 3
    assert sum(dropped(metrics, r) for r in ("unavailable", "rejected", "shutdown", "queue_full")) == 0


async def test_what_langfuse_keeps_refusing_is_counted_by_reason(receiver: LangfuseReceiver, keys: None) -> None:
    receiver.always = (503, {}, {"message": "down"})
    sink, metrics = await sink_with(receiver, "--sink-deadline", "1")
    for i in range(4):
        sink.emit(outcome(i))
    await until(lambda: dropped(metrics, "unavailable") == 4)
    await shutdown(sink, 0.5)

    receiver.always = None
    receiver.requests.clear()
    receiver.script = [(400, {}, {"message": "invalid body"}), (401, {}, {"message": "Invalid credentials"}),
                       (207, {}, {"accepted": 1, "rejected": 1, "errors": [{"message": "value out of range"}]})]
    sink, metrics = await sink_with(receiver)
    sink.emit(outcome(10))
    await until(lambda: dropped(metrics, "rejected") == 1)
    sink.emit(outcome(11))
    await until(lambda: dropped(metrics, "unauthorized") == 1)
    sink.emit(outcome(12))
    sink.emit(outcome(13))
    await until(lambda: dropped(metrics, "rejected") == 2)
    await shutdown(sink, 1.0)
    assert metrics.registry.get_sample_value("ctxprec_exported_spans_total",
                                             {"exporter": "langfuse", "outcome": "ok"}) == 1
    assert len(receiver.requests) == 3  # refusals are not sent again


async def test_failed_and_unscored_outcomes_send_nothing(receiver: LangfuseReceiver, keys: None) -> None:
    sink, _ = await sink_with(receiver)
    base = outcome(1)
    sink.emit(Outcome(base.retrieval, Decision.FAILED, None, ("judge_error", "boom"), {"id": "1"}))
    sink.emit(Outcome(base.retrieval, Decision.THROTTLED))
    sink.emit(outcome(2))
    await until(lambda: len(receiver.scores) == 1)
    await shutdown(sink, 1.0)
    assert receiver.scores[0]["traceId"] == outcome(2).retrieval.trace_id


def test_without_keys_serve_refuses_to_start_and_says_which(
        receiver: LangfuseReceiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("LANGFUSE_PUBLIC_KEY", raising=False)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET)
    parser = argparse.ArgumentParser()
    serve_module.add_arguments(parser)
    args = parser.parse_args(["--sink", "langfuse=http://127.0.0.1:9", "--otlp-grpc", "off", "--otlp-http", "off",
                              "--metrics", "off"])
    assert serve_module.run(args) == 2
    err = capsys.readouterr().err
    assert "sink langfuse: set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY" in err and SECRET not in err


def test_without_the_sdk_serve_refuses_to_start_and_says_what_to_install(tmp_path: Path) -> None:
    # A `pip install ctxprec` without the extra: the SDK cannot be imported. A package of that
    # name that fails to import stands in for its absence, in a process of its own.
    missing = tmp_path / "langfuse"
    missing.mkdir()
    (missing / "__init__.py").write_text("raise ImportError(\"No module named 'langfuse'\")\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "LANGFUSE_PUBLIC_KEY": PUBLIC, "LANGFUSE_SECRET_KEY": SECRET}
    done = subprocess.run([sys.executable, "-m", "ctxprec.collector.cli", "serve", "--sink", "langfuse=http://127.0.0.1:9",
                           "--otlp-grpc", "off", "--otlp-http", "off", "--metrics", "off"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "the langfuse SDK is not installed" in done.stderr and "pip install 'ctxprec[langfuse]'" in done.stderr
    assert "Traceback" not in done.stderr and SECRET not in done.stderr


@pytest.mark.slow
async def test_the_sink_never_holds_up_scoring(stub_judge: StubJudge, keys: None) -> None:
    """A Langfuse that answers after 3 s: scores keep coming at the judge's pace, the sink's
    requests are batched behind them."""
    slow = LangfuseReceiver()

    async def late(request: web.Request) -> web.Response:
        slow.requests.append(Recorded(time.monotonic(), dict(request.headers), json.loads(await request.read())))
        await asyncio.sleep(3.0)
        return web.json_response({"message": "Accepted"}, status=202)

    app = web.Application()
    app.router.add_post("/api/public/scores", late)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    outcomes = Outcomes()
    try:
        async with running(serve_config(*judge(stub_judge), "--sink", f"langfuse={url}")) as pipeline:
            pipeline.add_sink(outcomes)
            rag = RagApp(protocol="http", port=pipeline.otlp_http_port or 0, service="shop")
            began = time.monotonic()
            for i in range(10):
                rag.openinference(f"q{i}", [f"[relevant] p{i}", "[irrelevant] f"], "a")
            await rag.flush()
            await wait_until(lambda: len(outcomes.items) == 10, timeout=20, what="10 scores")
            scored_in = time.monotonic() - began
            await rag.close()
            await wait_until(lambda: sum(len(r.body) for r in slow.requests) == 10, timeout=20, what="all sent")
        assert scored_in < 3.0  # not waiting for the receiver's 3 s answers
        assert len(slow.requests) < 10  # batched
    finally:
        await runner.cleanup()


async def test_scores_still_waiting_at_shutdown_go_within_the_shutdown_deadline(
        stub_judge: StubJudge, receiver: LangfuseReceiver, keys: None) -> None:
    receiver.script = [(503, {"Retry-After": "2"}, {"message": "busy"})]
    outcomes = Outcomes()
    async with running(serve_config(*judge(stub_judge), "--sink", f"langfuse={receiver.url}")) as pipeline:
        pipeline.add_sink(outcomes)
        rag = RagApp(protocol="http", port=pipeline.otlp_http_port or 0, service="shop")
        for i in range(3):
            rag.openinference(f"q{i}", [f"[relevant] p{i}", "[irrelevant] f"], "a")
        await rag.flush()
        await rag.close()
        await wait_until(lambda: len(outcomes.items) == 3, timeout=20, what="3 scores")
        await wait_until(lambda: len(receiver.requests) == 1, timeout=5, what="the refused first try")
        stopping = time.monotonic()
    stopped_in = time.monotonic() - stopping
    # The shutdown waited out the Retry-After and sent all, within --shutdown-timeout 5 (+1).
    taken = {score["id"] for r in receiver.requests[1:] for score in r.body}
    assert len(taken) == 3 and {s["id"] for s in receiver.requests[0].body} <= taken
    assert 1.5 <= stopped_in < 5.0 + 1.0 + 1.0
