"""The judge API key never leaves through an error, a log line, a score record, /metrics or an
exported span. Every case first checks that the key was really sent to the judge (so that its
absence elsewhere means something), and the failure cases include a judge that echoes the
Authorization header back in its error body, as some providers do."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

import aiohttp
import pytest
from aiohttp import web

from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import build_engine
from ctxprec.scorer.judge.chat import ChatMessage, JudgeError
from ctxprec.scorer.judge.factory import make_chat_client
from tests.collector.rag_app import RagApp, running, serve_config, wait_until
from tests.helpers.otlp_capture import OtlpCapture

SECRET = "sk-test-SECRET123"
MakeStub = Callable[..., Awaitable[StubJudge]]
CTXPREC = Path(sys.executable).with_name("ctxprec")
QUERY = "How do I reset my password?"
ANSWER = "Open settings and choose reset password."
DOCS = ["[relevant] Reset it under Settings > Security.", "[irrelevant] Our pricing plans."]


def assert_clean(where: str, text: str | bytes) -> None:
    needle = SECRET.encode() if isinstance(text, bytes) else SECRET
    assert needle not in text, f"the judge API key leaked into {where}"


def all_logs(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record as a handler would write it, tracebacks included."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


def exception_text(exc: BaseException) -> str:
    """str, repr and the full traceback with chained causes."""
    return "\n".join([str(exc), repr(exc), "".join(traceback.format_exception(exc))])


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    # litellm's loggers do not propagate to the root logger; listen to them directly.
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).addHandler(caplog.handler)
    yield caplog
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).removeHandler(caplog.handler)


class EchoJudge:
    """A real HTTP judge that rejects every request with the Authorization header copied into
    its error message (status and body configurable), and records what it was sent."""

    def __init__(self, status: int = 401) -> None:
        self.status = status
        self.authorizations: list[str | None] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _chat(self, request: web.Request) -> web.Response:
        header = request.headers.get("Authorization")
        self.authorizations.append(header)
        if self.status == 200:  # a "successful" answer that is not a chat completion
            return web.Response(text=f"upstream proxy says: bad gateway for {header}", content_type="text/plain")
        body = {"error": {"message": f"Incorrect API key provided: {header}", "type": "invalid_request_error"}}
        return web.json_response(body, status=self.status)

    async def start(self) -> "EchoJudge":
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@pytest.fixture
async def echo_judge() -> AsyncIterator[Callable[..., Awaitable[EchoJudge]]]:
    started: list[EchoJudge] = []

    async def make(status: int = 401) -> EchoJudge:
        judge = await EchoJudge(status).start()
        started.append(judge)
        return judge

    try:
        yield make
    finally:
        for judge in started:
            await judge.stop()


def ask() -> list[ChatMessage]:
    data = {"task": "verdicts", "query": "q", "reference_kind": "output", "reference": "reset password",
            "contexts": [{"context_index": 0, "text": "Reset the password in settings."}]}
    return [ChatMessage("system", "Judge."), ChatMessage("user", "BEGIN_DATA\n" + json.dumps(data) + "\nEND_DATA")]


async def failing_call(config: JudgeConfig) -> JudgeError:
    client = make_chat_client(config)
    try:
        with pytest.raises(JudgeError) as caught:
            await client.complete(ask())
    finally:
        await client.aclose()
    return caught.value


# --- the judge client ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "kind"),
    [
        ({"api_key": "sk-the-right-one"}, "client_error"),  # our key is refused: 401
        ({"api_key": SECRET, "error_rate": 1.0, "fault_kinds": ("server_error",)}, "server_error"),
        ({"api_key": SECRET, "error_rate": 1.0, "fault_kinds": ("rate_limit",), "retry_after_s": 0.05}, "rate_limited"),
        ({"api_key": SECRET, "error_rate": 1.0, "fault_kinds": ("timeout",), "hang_s": 5.0}, "timeout"),
        ({"api_key": SECRET, "error_rate": 1.0, "fault_kinds": ("malformed",)}, None),
    ],
)
async def test_client_errors_and_debug_logs_never_hold_the_key(
    make_stub_judge: MakeStub, debug_logs: pytest.LogCaptureFixture, settings: dict[str, Any], kind: str | None
) -> None:
    stub = await make_stub_judge(**settings)
    config = JudgeConfig(model="openai/stub", api_base=stub.url, api_key=SECRET, max_retries=1, timeout_s=0.5)
    if kind is None:
        # A malformed 200 is not a client failure; it surfaces from the engine as a bad response.
        engine = build_engine(config)
        try:
            with pytest.raises(JudgeError) as caught:
                await engine.score("q", ["ctx"], output="a")
        finally:
            await engine.aclose()
        error = caught.value
    else:
        error = await failing_call(config)
        assert error.kind == kind
    assert stub.recent and all(r.authorization == f"Bearer {SECRET}" for r in stub.recent)
    assert_clean("the exception", exception_text(error))
    assert_clean("the logs", all_logs(debug_logs))
    assert_clean("repr(JudgeConfig)", repr(config))


@pytest.mark.parametrize("status", [401, 403, 500, 200])
async def test_a_judge_that_echoes_the_key_is_scrubbed(
    echo_judge: Callable[..., Awaitable[EchoJudge]], debug_logs: pytest.LogCaptureFixture, status: int
) -> None:
    judge = await echo_judge(status)
    error = await failing_call(JudgeConfig(model="openai/stub", api_base=judge.url, api_key=SECRET, max_retries=1))
    assert judge.authorizations and judge.authorizations[0] == f"Bearer {SECRET}"
    text = exception_text(error)
    assert_clean("the exception", text)
    assert "***" in text  # the echoed key was there and got masked, the rest of the message kept
    assert_clean("the logs", all_logs(debug_logs))


async def test_key_from_the_environment_is_scrubbed_too(
    echo_judge: Callable[..., Awaitable[EchoJudge]], debug_logs: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    judge = await echo_judge(401)
    error = await failing_call(JudgeConfig(model="openai/stub", api_base=judge.url, max_retries=0))
    assert judge.authorizations == [f"Bearer {SECRET}"]
    assert_clean("the exception", exception_text(error))
    assert_clean("the logs", all_logs(debug_logs))


async def test_litellm_transport_errors_and_logs_never_hold_the_key(
    echo_judge: Callable[..., Awaitable[EchoJudge]], debug_logs: pytest.LogCaptureFixture
) -> None:
    judge = await echo_judge(401)
    config = JudgeConfig(model="openai/stub", api_base=judge.url, api_key=SECRET, max_retries=0, transport="litellm",
                         timeout_s=60)
    error = await failing_call(config)
    assert judge.authorizations and judge.authorizations[0] == f"Bearer {SECRET}"
    assert_clean("the exception", exception_text(error))
    assert_clean("the logs", all_logs(debug_logs))


# --- `ctxprec score`, the real console script -------------------------------------------------


def events_file(tmp_path: Path) -> Path:
    path = tmp_path / "events.jsonl"
    lines = [{"trace_id": f"{i:032x}", "span_id": f"{i:016x}", "query": QUERY, "contexts": DOCS, "output": ANSWER}
             for i in range(1, 4)]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


async def run_score(tmp_path: Path, api_base: str) -> tuple[int, str, str, list[dict[str, Any]]]:
    out = tmp_path / "scores.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPREC_")}
    env.update(OPENAI_API_KEY=SECRET, LITELLM_LOCAL_MODEL_COST_MAP="True")
    proc = await asyncio.create_subprocess_exec(
        str(CTXPREC), "score", str(events_file(tmp_path)), "-o", str(out), "--judge-model", "openai/stub",
        "--judge-api-base", api_base, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL, env=env,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 90)
    raw = out.read_text() if out.exists() else ""
    assert_clean("the score records", raw)
    records = [json.loads(line) for line in raw.splitlines() if line.strip()]
    return proc.returncode or 0, stdout.decode(), stderr.decode(), records


async def test_score_records_and_output_of_ctxprec_score_never_hold_the_key(
    make_stub_judge: MakeStub, echo_judge: Callable[..., Awaitable[EchoJudge]], tmp_path: Path
) -> None:
    stub = await make_stub_judge(api_key=SECRET)
    rc, stdout, stderr, records = await run_score(tmp_path, stub.url)
    assert rc == 0, stderr
    assert [r["score"] for r in records] == [1.0, 1.0, 1.0]
    assert stub.recent[-1].authorization == f"Bearer {SECRET}"
    assert_clean("stdout", stdout)
    assert_clean("stderr", stderr)

    echo = await echo_judge(401)
    rc, stdout, stderr, records = await run_score(tmp_path, echo.url)
    assert echo.authorizations and echo.authorizations[0] == f"Bearer {SECRET}"
    assert len(records) == 3 and all(r["score"] is None and r["error"] for r in records)
    assert all("Incorrect API key provided: Bearer ***" in r["error"]["message"] for r in records)
    assert_clean("stdout", stdout)
    assert_clean("stderr", stderr)


# --- the sidecar: /metrics, forwarded spans, evaluator spans and logs --------------------------


async def fetch(url: str) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            return await response.text()


async def serve_and_send(judge_url: str, mode: str, capture: OtlpCapture) -> tuple[str, list[Any]]:
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", judge_url, "--judge-api-key", SECRET,
                          "--judge-max-retries", "0", "--forward-to", capture.http_url, "--write-back", mode,
                          "--log-level", "debug")
    async with running(config) as pipeline:
        app = RagApp(protocol="http", port=pipeline.otlp_http_port)
        emitted = [app.openinference(QUERY, DOCS, ANSWER), app.genai(QUERY, DOCS, ANSWER)]
        await app.flush()
        await app.close()
        await wait_until(lambda: all(any(
            ("gen_ai.evaluation.name" in s.attributes or "error.type" in s.attributes)
            for s in capture.spans if s.trace_id == e.trace_id) for e in emitted), what="scores exported")
        metrics = await fetch(f"{pipeline.metrics_url}/metrics")
        metrics += await fetch(f"{pipeline.metrics_url}/readyz")
    return metrics, emitted


@pytest.mark.parametrize("mode", ["span", "evaluator"])
async def test_sidecar_exports_and_metrics_never_hold_the_key(
    make_stub_judge: MakeStub, echo_judge: Callable[..., Awaitable[EchoJudge]],
    debug_logs: pytest.LogCaptureFixture, mode: str,
) -> None:
    stub = await make_stub_judge(api_key=SECRET)
    echo = await echo_judge(401)
    for judge_url, scored in ((stub.url, True), (echo.url, False)):
        capture = await OtlpCapture().start()
        try:
            metrics, _ = await serve_and_send(judge_url, mode, capture)
            assert_clean("/metrics and /readyz", metrics)
            for body in capture.bodies:
                assert_clean("an exported OTLP request", body)
            for log in capture.logs:
                assert_clean("an exported log record", str(log.record))
            key = "gen_ai.evaluation.name" if scored else "error.type"
            assert len(capture.find_spans(key)) == 2, f"expected two exported spans with {key}"
            if mode == "evaluator":
                assert len(capture.logs) >= 2  # gen_ai.evaluation.result records were checked too
            else:
                assert len(capture.spans) >= 6  # every span of the two traces passed through
        finally:
            await capture.stop()
    assert stub.recent and stub.recent[-1].authorization == f"Bearer {SECRET}"
    assert echo.authorizations and echo.authorizations[-1] == f"Bearer {SECRET}"
    assert_clean("the sidecar's logs", all_logs(debug_logs))
