"""LimitedChatClient over real HTTP (the stub judge, or a tiny misbehaving server where the stub
has no such fault): retries, Retry-After, timeouts, bad bodies, the breaker, rate limits, observer
events, tokens and cost, both transports, and that the API key never reaches an error message."""
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.judge.chat import (
    ChatMessage,
    JudgeBadResponse,
    JudgeError,
    JudgeRateLimited,
    JudgeTimeout,
    JudgeUnavailable,
    RequestEvent,
)
from ctxprec.scorer.judge.client import LimitedChatClient
from ctxprec.scorer.judge.factory import make_chat_client
from ctxprec.scorer.judge.limits import CircuitBreaker, RateLimiter
from ctxprec.scorer.judge.transport_litellm import LiteLLMTransport, import_litellm
from ctxprec.scorer.judge.transport_openai import OpenAIDirectTransport
from ctxprec.scorer.retry import Backoff, parse_retry_after

FAST = Backoff(base_s=0.01, cap_s=0.05)
STUB_MODEL = "openai/ctxprec-stub-judge"
SECRET = "sk-test-DO-NOT-LEAK-0123456789"


def messages(contexts: list[str] | None = None, reference: str = "password reset settings") -> list[ChatMessage]:
    contexts = contexts if contexts is not None else ["Reset the password in settings.", "Lunch menu."]
    data = {"task": "verdicts", "query": "q", "reference_kind": "output", "reference": reference,
            "contexts": [{"context_index": i, "text": t} for i, t in enumerate(contexts)]}
    return [ChatMessage("system", "You are a judge."),
            ChatMessage("user", "Judge.\nBEGIN_DATA\n" + json.dumps(data) + "\nEND_DATA")]


def client_for(url: str, *, observer: Callable[[RequestEvent], None] | None = None, model: str = STUB_MODEL,
               backoff: Backoff = FAST, **config) -> LimitedChatClient:
    cfg = JudgeConfig(model=model, api_base=url, **config)
    transport = OpenAIDirectTransport(api_base=url, model=model.split("/", 1)[1], api_key=cfg.api_key)
    return LimitedChatClient(transport, model=model, config=cfg, observer=observer, backoff=backoff)


@pytest.fixture
async def odd_server() -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """A real HTTP server whose single route answers with the given handler."""
    runners: list[web.AppRunner] = []

    async def start(handler) -> str:
        async def route(request: web.Request) -> web.Response:
            return handler(request)

        app = web.Application()
        app.router.add_post("/v1/chat/completions", route)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_ok_call_reports_usage_and_one_event(stub_judge: StubJudge) -> None:
    events: list[RequestEvent] = []
    client = client_for(stub_judge.url, observer=events.append)
    try:
        response = await client.complete(messages())
    finally:
        await client.aclose()
    verdicts = json.loads(response.text)["verdicts"]
    assert [v["verdict"] for v in verdicts] == ["yes", "no"]
    assert response.attempts == 1 and response.latency_ms > 0
    assert (response.prompt_tokens, response.completion_tokens) == (stub_judge.stats.prompt_tokens,
                                                                   stub_judge.stats.completion_tokens)
    assert response.prompt_tokens > 0 and response.cost_usd == 0.0  # litellm does not know the stub's model
    assert [(e.outcome, e.prompt_tokens, e.cost_usd) for e in events] == [("ok", response.prompt_tokens, 0.0)]
    sent = stub_judge.recent[-1].body
    assert sent["model"] == "ctxprec-stub-judge" and sent["response_format"] == {"type": "json_object"}  # no schema given
    assert sent["temperature"] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["auto", "litellm"])
async def test_cost_of_a_known_model_matches_litellm_cost_map(stub_judge: StubJudge, transport: str) -> None:
    events: list[RequestEvent] = []
    client = make_chat_client(JudgeConfig(model="openai/gpt-4o-mini", api_base=stub_judge.url, api_key=SECRET,
                                          transport=transport), observer=events.append)
    try:
        expected_transport = LiteLLMTransport if transport == "litellm" else OpenAIDirectTransport
        assert isinstance(client.transport, expected_transport)
        response = await client.complete(messages(), max_tokens=300)
    finally:
        await client.aclose()
    prompt_cost, completion_cost = import_litellm().cost_per_token(
        model="openai/gpt-4o-mini", prompt_tokens=response.prompt_tokens, completion_tokens=response.completion_tokens)
    assert response.cost_usd > 0
    assert response.cost_usd == pytest.approx(prompt_cost + completion_cost, rel=1e-9)
    assert events[-1].cost_usd == response.cost_usd
    assert stub_judge.recent[-1].authorization == f"Bearer {SECRET}"
    assert stub_judge.recent[-1].body["max_tokens"] == 300
    assert json.loads(response.text)["verdicts"][0]["verdict"] == "yes"


async def test_429_is_retried_after_retry_after(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("rate_limit",), retry_after_s=0.4)
    events: list[RequestEvent] = []

    def observe(event: RequestEvent) -> None:
        events.append(event)
        stub.configure(error_rate=0.0)  # the judge recovers once it has refused once

    client = client_for(stub.url, observer=observe, backoff=Backoff(base_s=0.001, cap_s=5))
    started = time.perf_counter()
    try:
        response = await client.complete(messages())
    finally:
        await client.aclose()
    assert time.perf_counter() - started >= 0.4  # the tiny base backoff alone would wait < 2 ms
    assert response.attempts == 2
    assert [e.outcome for e in events] == ["rate_limited", "ok"]
    assert stub.stats.responses == {429: 1, 200: 1}


async def test_retry_after_is_capped_and_exhaustion_raises_rate_limited(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("rate_limit",), retry_after_s=120)
    events: list[RequestEvent] = []
    client = client_for(stub.url, observer=events.append, backoff=Backoff(base_s=0.01, cap_s=0.1), max_retries=2)
    started = time.perf_counter()
    with pytest.raises(JudgeRateLimited) as caught:
        await client.complete(messages())
    await client.aclose()
    assert time.perf_counter() - started < 5
    assert caught.value.kind == "rate_limited" and "3 attempts" in str(caught.value)
    assert [e.outcome for e in events] == ["rate_limited"] * 3
    assert stub.stats.requests == 3


async def test_500_is_retried_then_fails_with_server_error(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("server_error",))
    events: list[RequestEvent] = []
    client = client_for(stub.url, observer=events.append, max_retries=3)
    with pytest.raises(JudgeError) as caught:
        await client.complete(messages())
    await client.aclose()
    assert caught.value.kind == "server_error" and "HTTP 500" in str(caught.value)
    # The first 500 might have been a form the server rejects: one probe per form, all 500 too,
    # settles nothing (a judge that is down keeps the best form); then the three retries.
    assert [e.outcome for e in events] == ["server_error"] * (1 + 4 + 3)
    assert stub.stats.responses == {500: 8}
    assert client.forms.form == "json_schema" and not client.forms.settled


async def test_timeouts_are_per_attempt_and_retried(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("timeout",), hang_s=30)
    events: list[RequestEvent] = []
    client = client_for(stub.url, observer=events.append, timeout_s=0.3, max_retries=1)
    started = time.perf_counter()
    with pytest.raises(JudgeTimeout):
        await client.complete(messages())
    await client.aclose()
    assert 0.6 <= time.perf_counter() - started < 5
    assert [e.outcome for e in events] == ["timeout", "timeout"]
    assert all(e.latency_s >= 0.3 for e in events)


async def test_timeouts_open_the_breaker_as_they_happen_across_calls(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("timeout",), hang_s=30)
    events: list[RequestEvent] = []
    client = client_for(stub.url, observer=events.append, timeout_s=0.2, max_retries=4, breaker_threshold=3,
                        structured_output="json_object")
    started = time.perf_counter()
    with pytest.raises(JudgeTimeout) as caught:
        await client.complete(messages())
    assert client.breaker.state == "open"
    # Three timed-out attempts of one call opened it: the fourth attempt was never sent.
    assert [e.outcome for e in events] == ["timeout"] * 3 + ["circuit_open"]
    assert "after 3 attempts; not tried again: the circuit breaker opened" in str(caught.value)
    assert time.perf_counter() - started < 0.2 * 5
    with pytest.raises(JudgeUnavailable, match="3 consecutive timeouts"):
        await client.complete(messages())
    await client.aclose()


async def test_a_call_spends_at_most_one_timeout_per_attempt_whatever_the_backoff(odd_server) -> None:
    url = await odd_server(lambda request: web.Response(status=500, text="down"))
    events: list[RequestEvent] = []
    cfg = JudgeConfig(model=STUB_MODEL, api_base=url, timeout_s=0.3, max_retries=4, structured_output="json_object")
    transport = OpenAIDirectTransport(api_base=url, model="ctxprec-stub-judge")
    # Waits of 2 s between attempts would take the call past its 5 x 0.3 s: it stops instead.
    client = LimitedChatClient(transport, model=STUB_MODEL, config=cfg, observer=events.append,
                               backoff=Backoff(base_s=2.0, cap_s=2.0, jitter=0.0))
    started = time.perf_counter()
    with pytest.raises(JudgeError) as caught:
        await client.complete(messages())
    await client.aclose()
    assert time.perf_counter() - started < 0.3 * 5
    assert caught.value.kind == "server_error" and [e.outcome for e in events] == ["server_error"]


@pytest.mark.parametrize(
    "body",
    [b"<html>gateway hiccup</html>", b'{"choices": []}', b'{"choices": [{"message": {"content": null}}]}'],
)
async def test_unusable_bodies_are_retried_then_bad_response(odd_server, body: bytes) -> None:
    url = await odd_server(lambda request: web.Response(body=body, content_type="application/json"))
    events: list[RequestEvent] = []
    client = client_for(url, observer=events.append, max_retries=1)
    with pytest.raises(JudgeBadResponse):
        await client.complete(messages())
    await client.aclose()
    assert [e.outcome for e in events] == ["bad_response", "bad_response"]


async def test_malformed_content_is_returned_for_the_judge_to_reject(make_stub_judge) -> None:
    # A 200 whose content is not JSON is a valid chat completion; verdict parsing is the judge's job.
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("malformed",))
    client = client_for(stub.url)
    response = await client.complete(messages())
    await client.aclose()
    with pytest.raises(ValueError):
        json.loads(response.text)


async def test_connection_refused_is_a_connection_error() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    events: list[RequestEvent] = []
    client = client_for(f"http://127.0.0.1:{port}/v1", observer=events.append, max_retries=1)
    with pytest.raises(JudgeError) as caught:
        await client.complete(messages())
    await client.aclose()
    assert caught.value.kind == "connection_error" and f"127.0.0.1:{port}" in str(caught.value)
    assert [e.outcome for e in events] == ["connection_error"] * 2


async def test_breaker_opens_fails_fast_and_recovers(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("server_error",))
    events: list[RequestEvent] = []
    client = client_for(stub.url, observer=events.append, max_retries=0, breaker_threshold=2, breaker_cooldown_s=0.5,
                        structured_output="json_object")  # no form probes among the counted requests
    for _ in range(2):
        with pytest.raises(JudgeError):
            await client.complete(messages())
    assert client.breaker.state == "open"
    started = time.perf_counter()
    with pytest.raises(JudgeUnavailable) as caught:
        await client.complete(messages())
    assert time.perf_counter() - started < 0.05 and caught.value.kind == "circuit_open"
    assert stub.stats.requests == 2  # failing fast sends nothing
    assert events[-1].outcome == "circuit_open"

    await asyncio.sleep(0.55)
    with pytest.raises(JudgeError) as probe_failed:  # the half-open probe fails: open again
        await client.complete(messages())
    assert probe_failed.value.kind == "server_error" and stub.stats.requests == 3
    with pytest.raises(JudgeUnavailable):
        await client.complete(messages())
    assert stub.stats.requests == 3

    stub.configure(error_rate=0.0, latency_ms=200)
    await asyncio.sleep(0.55)
    results = await asyncio.gather(*(client.complete(messages()) for _ in range(3)), return_exceptions=True)
    assert sum(not isinstance(r, Exception) for r in results) == 1  # exactly one probe went through
    assert sum(isinstance(r, JudgeUnavailable) for r in results) == 2
    assert client.breaker.state == "closed"
    await client.complete(messages())
    await client.aclose()
    assert stub.stats.requests == 5


async def test_client_errors_are_not_retried_and_do_not_open_the_breaker(make_stub_judge) -> None:
    stub = await make_stub_judge(api_key="the-right-key")
    events: list[RequestEvent] = []
    client = client_for(stub.url, observer=events.append, api_key=SECRET, breaker_threshold=1)
    for _ in range(2):
        with pytest.raises(JudgeError) as caught:
            await client.complete(messages())
        assert caught.value.kind == "client_error" and "HTTP 401" in str(caught.value)
    await client.aclose()
    assert [e.outcome for e in events] == ["client_error", "client_error"]
    assert client.breaker.state == "closed"


async def test_request_rate_limit_spaces_calls(stub_judge: StubJudge) -> None:
    client = client_for(stub_judge.url, requests_per_minute=1200)  # 20/s, burst of 20
    started = time.perf_counter()
    await asyncio.gather(*(client.complete(messages()) for _ in range(30)))
    elapsed = time.perf_counter() - started
    await client.aclose()
    assert 0.45 <= elapsed < 5  # 10 calls beyond the burst at 50 ms each


async def test_token_rate_limit_waits_and_is_corrected_by_real_usage() -> None:
    limiter = RateLimiter(tokens_per_minute=6000)  # 100 tokens/s, burst 100
    started = time.perf_counter()
    await limiter.acquire(100)
    assert time.perf_counter() - started < 0.05
    await limiter.acquire(50)  # the bucket is empty: 0.5 s
    assert time.perf_counter() - started >= 0.45
    limiter.settle(50, 0)  # the call used nothing after all: the 50 come back
    mark = time.perf_counter()
    await limiter.acquire(50)
    assert time.perf_counter() - mark < 0.1


def test_breaker_state_machine_with_a_fake_clock() -> None:
    now = [0.0]
    breaker = CircuitBreaker(3, 10.0, clock=lambda: now[0])
    for _ in range(2):
        assert breaker.before_call() is False
        breaker.record_failure()
    breaker.record_success()  # success resets the run of failures
    for _ in range(3):
        breaker.before_call()
        breaker.record_failure()
    assert breaker.state == "open"
    now[0] = 9.9
    with pytest.raises(JudgeUnavailable, match="next probe in 0.1s"):
        breaker.before_call()
    now[0] = 10.0
    assert breaker.before_call() is True
    with pytest.raises(JudgeUnavailable, match="probe"):
        breaker.before_call()
    breaker.release_probe()  # a cancelled probe lets the next caller probe
    assert breaker.before_call() is True
    breaker.record_success()
    assert breaker.state == "closed" and breaker.before_call() is False


def test_backoff_full_jitter_and_cap() -> None:
    backoff = Backoff(base_s=0.5, cap_s=4.0)
    assert [backoff.delay(a, rng=lambda: 1.0) for a in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert backoff.delay(3, rng=lambda: 0.0) == 0.0
    assert backoff.delay(0, retry_after_s=2.0, rng=lambda: 0.0) == 2.0
    assert backoff.delay(0, retry_after_s=600, rng=lambda: 0.5) == 4.0


def test_parse_retry_after() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 0.25 ") == 0.25
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None and parse_retry_after("nan") is None
    now = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(later, now=now.timestamp()) == pytest.approx(30.0)
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now=now.timestamp()) == 0.0


@pytest.mark.slow
async def test_api_key_never_in_error_text(odd_server, make_stub_judge) -> None:
    def echo_key(request: web.Request) -> web.Response:
        # Like OpenAI's 401: the server quotes the key it was given.
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        return web.json_response({"error": {"message": f"Incorrect API key provided: {key}"}}, status=401)

    url = await odd_server(echo_key)
    stub = await make_stub_judge(api_key="the-right-key")
    for transport, base in [("auto", url), ("litellm", url), ("auto", stub.url), ("litellm", stub.url)]:
        client = make_chat_client(JudgeConfig(model="openai/gpt-4o-mini", api_base=base, api_key=SECRET,
                                              transport=transport, max_retries=0))
        with pytest.raises(JudgeError) as caught:
            await client.complete(messages())
        await client.aclose()
        text = str(caught.value) + repr(caught.value) + str(caught.value.args)
        assert SECRET not in text and "Authorization" not in text and "Bearer" not in text
        assert caught.value.kind == "client_error", (transport, text)
        if base == url:
            assert "***" in text  # the quoted key was scrubbed, the rest of the message kept


async def test_litellm_transport_retries_429(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("rate_limit",), retry_after_s=0)
    events: list[RequestEvent] = []
    config = JudgeConfig(model=STUB_MODEL, api_base=stub.url, api_key="k", transport="litellm", max_retries=1)
    client = LimitedChatClient(LiteLLMTransport(model=STUB_MODEL, api_base=stub.url, api_key="k"), model=STUB_MODEL,
                               config=config, observer=events.append, backoff=FAST)
    with pytest.raises(JudgeRateLimited):
        await client.complete(messages())
    stub.configure(error_rate=0.0)
    response = await client.complete(messages())
    await client.aclose()
    assert [e.outcome for e in events] == ["rate_limited", "rate_limited", "ok"]
    assert response.prompt_tokens == stub.stats.prompt_tokens and response.cost_usd == 0.0


async def test_factory_routes(stub_judge: StubJudge, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key-1")
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    client = make_chat_client(JudgeConfig(model="openai/ctxprec-stub-judge", api_base=stub_judge.url))
    await client.complete(messages())
    await client.aclose()
    assert stub_judge.recent[-1].authorization == "Bearer env-key-1"  # the provider's usual env variable

    vllm = make_chat_client(JudgeConfig(model="hosted_vllm/my-model", api_base=stub_judge.url))
    bare = make_chat_client(JudgeConfig(model="gpt-4o-mini", api_base=stub_judge.url))  # litellm says: openai
    anthropic = make_chat_client(JudgeConfig(model="anthropic/claude-3-5-haiku-latest", api_key="x"))
    assert isinstance(vllm.transport, OpenAIDirectTransport) and isinstance(bare.transport, OpenAIDirectTransport)
    assert isinstance(anthropic.transport, LiteLLMTransport)
    await bare.complete(messages())
    assert stub_judge.recent[-1].body["model"] == "gpt-4o-mini"
    for c in (vllm, bare, anthropic):
        await c.aclose()

    # A provider's API starts at the configured concurrency; a server at an http:// address at one.
    hosted = make_chat_client(JudgeConfig(model="openai/gpt-4o-mini", api_base="https://api.example/v1",
                                          api_key="x", concurrency=24))
    assert hosted.in_flight_limit.allowed == 24 and anthropic.in_flight_limit.allowed == 16
    assert vllm.in_flight_limit.allowed == 1
    ollama = make_chat_client(JudgeConfig(model="ollama_chat/llama3"))
    assert ollama.in_flight_limit.allowed == 1
    for c in (hosted, ollama):
        await c.aclose()

    with pytest.raises(ValueError, match="local"):
        make_chat_client(JudgeConfig(model="local"))
    with pytest.raises(ValueError, match="transport"):
        make_chat_client(JudgeConfig(model="anthropic/claude-3-5-haiku-latest", transport="direct"))
    with pytest.raises(ValueError, match="api_base"):
        make_chat_client(JudgeConfig(model="hosted_vllm/my-model"))
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ValueError, match="api_key"):
        make_chat_client(JudgeConfig(model="openai/gpt-4o-mini"))


@pytest.mark.parametrize(
    "field,value",
    [("transport", "carrier-pigeon"), ("reason_mode", "vibes"), ("concurrency", 0), ("timeout_s", -1.0),
     ("max_retries", -1), ("breaker_threshold", 0), ("requests_per_minute", 0), ("temperature", 5.0),
     ("cache_size", -5), ("model", "")],
)
def test_judge_config_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        JudgeConfig(**{field: value})


def test_judge_config_repr_hides_the_api_key() -> None:
    config = JudgeConfig(model="openai/gpt-4o-mini", api_key=SECRET)
    assert SECRET not in repr(config) and SECRET not in str(config)
    assert config.api_key == SECRET


def test_direct_path_with_an_unpriced_model_does_not_import_litellm() -> None:
    # litellm's import costs seconds of CPU; the stub's and self-hosted models must not pay it.
    script = """
import asyncio, json, sys
from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.judge.chat import ChatMessage
from ctxprec.scorer.judge.factory import make_chat_client

async def main():
    stub = StubJudge()
    await stub.start()
    client = make_chat_client(JudgeConfig(model="hosted_vllm/my-self-hosted-model", api_base=stub.url))
    data = {"task": "verdicts", "query": "q", "reference_kind": "query", "reference": "",
            "contexts": [{"context_index": 0, "text": "t"}]}
    response = await client.complete([ChatMessage("user", "BEGIN_DATA\\n" + json.dumps(data) + "\\nEND_DATA")])
    await client.aclose()
    await stub.stop()
    print(response.cost_usd, "litellm" in sys.modules)

asyncio.run(main())
"""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0.0", "False"]


async def test_warm_up_prepares_the_client_without_calling_the_judge(stub_judge: StubJudge) -> None:
    client = client_for(stub_judge.url)
    try:
        await client.warm_up()
        assert stub_judge.stats.requests == 0
        transport = client.transport
        assert isinstance(transport, OpenAIDirectTransport) and transport._session is not None
        session = transport._session
        assert (await client._resolve_prices()).at() == (0.0, 0.0)  # the stub's model is not in the cost map
        response = await client.complete(messages())
        assert response.cost_usd == 0.0 and stub_judge.stats.requests == 1
        assert transport._session is session  # the first request used the session made at start-up
    finally:
        await client.aclose()
    assert transport._session is None
    # Closing while the start-up price look-up may still run leaves nothing behind.
    second = client_for(stub_judge.url)
    await second.warm_up()
    await second.aclose()
