"""A judge that changes mid-run is noticed: a sidecar over real OTLP and HTTP, the stub judge
switched to flip a share of its verdicts. `ctxprec_judge_changed` goes to 1 at the first canary
round after the switch, the drift alarm that follows says the judge changed (in the log and on
/diagnostics/drift), and the same traffic before the switch, with the canary's rounds passing
over an unchanged judge, raised neither."""
from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from ctxprec.collector.metrics.drift import DriftConfig
from tests.collector.rag_app import RagApp, running, scrape, serve_config, value

pytestmark = pytest.mark.slow

QUERY = "How do I reset my password?"
ANSWER = "Open Settings, choose Security and click Reset Password; the emailed link expires after 30 minutes."


def docs(i: int) -> list[str]:
    # Each retrieval's texts differ (the live judge's verdict cache must not answer for the changed
    # judge), and all are relevant to the answer: precision 1.0 from an unchanged judge.
    return [f"Note {i}-a: to reset a password open Settings and choose Security.",
            f"Note {i}-b: the emailed reset link expires after 30 minutes.",
            f"Note {i}-c: click Reset Password under Security settings."]


async def get_json(session: aiohttp.ClientSession, url: str) -> dict:
    async with session.get(url) as response:
        assert response.status == 200
        return await response.json()


async def metrics(session: aiohttp.ClientSession, url: str) -> dict:
    async with session.get(f"{url}/metrics") as response:
        return scrape(await response.text())


async def poll(check, what: str, timeout: float = 90.0):
    """Polls `check()` (async) until it gives something truthy; generous deadline (2 cores, shared)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = await check()
        if got:
            return got
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def send(app: RagApp, first: int, count: int) -> None:
    for i in range(first, first + count):
        app.openinference(QUERY, docs(i), ANSWER)
    await app.flush()


async def test_a_changed_judge_is_noticed_and_the_drift_after_it_says_so(make_stub_judge, caplog) -> None:
    stub = await make_stub_judge()
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k",
                          "--judge-canary-interval", "5", "--diagnostics", "on")
    config = config.model_copy(update={"drift": DriftConfig(warmup=12, batch=4, threshold=4.0)})
    caplog.set_level(logging.INFO)
    async with running(config) as pipeline, aiohttp.ClientSession() as session:
        url = pipeline.metrics_url
        assert url is not None and pipeline.canary is not None
        app = RagApp(protocol="http", port=pipeline.otlp_http_port, service="support-bot")

        def rounds(m: dict, outcome: str) -> float:
            return value(m, "ctxprec_judge_canary_rounds_total", outcome=outcome)

        # The same traffic from an unchanged judge, while the canary's rounds pass: neither raised.
        await poll(lambda: _has(session, url, lambda m: rounds(m, "baseline") >= 1), "the canary baseline")
        await send(app, 0, 24)
        await poll(lambda: _has(session, url, lambda m: value(
            m, "ctxprec_samples_total", service="support-bot", decision="evaluated") >= 24), "24 scores")
        await poll(lambda: _has(session, url, lambda m: rounds(m, "unchanged") >= 2), "two unchanged rounds")
        m = await metrics(session, url)
        assert value(m, "ctxprec_judge_changed") == 0
        assert rounds(m, "changed") == 0
        assert value(m, "ctxprec_precision_drift", service="support-bot") == 0
        # The canary's requests are its own, under judge="canary"; the live judge's under "live".
        assert value(m, "ctxprec_judge_requests_total", model="openai/stub", outcome="ok", judge="canary") >= 3 * 30
        assert value(m, "ctxprec_judge_requests_total", model="openai/stub", outcome="ok", judge="live") >= 24
        assert "judge changed" not in caplog.text

        # The judge changes behind the same name: half its verdicts turn around.
        before = rounds(m, "unchanged") + rounds(m, "changed")
        stub.configure(flip_rate=0.5, flip_salt="update-1")
        m = await poll(lambda: _has(session, url, lambda m: value(m, "ctxprec_judge_changed") == 1),
                       "ctxprec_judge_changed = 1")
        # Within one interval: the first round that started after the switch (or the one running
        # through it) said so.
        assert rounds(m, "unchanged") + rounds(m, "changed") - before <= 2
        assert rounds(m, "changed") >= 1
        assert "judge changed: the same fingerprint" in caplog.text

        # The precision drop that follows is the judge's: its alarm says so.
        await send(app, 100, 40)
        await poll(lambda: _has(session, url, lambda m: value(
            m, "ctxprec_precision_drift", service="support-bot") == 1), "the drift alarm")
        drift = await get_json(session, f"{url}/diagnostics/drift?service=support-bot")
        at_alarm = drift["services"][0]["at_alarm"]
        assert at_alarm["judge_changed"] and "judge changed" in at_alarm["judge_changed"]
        assert "judge changed" in at_alarm["message"]
        alarm_lines = [r.getMessage() for r in caplog.records if "precision drift in service" in r.getMessage()]
        assert alarm_lines and all("judge changed" in line for line in alarm_lines)
        judge = await get_json(session, f"{url}/diagnostics/judge")
        canary = judge["sections"]["canary"]
        assert canary["changed"] is True and canary["changes"][-1]["what"] == "answers"

        # Acknowledged: back to 0, and a new baseline from the judge as it answers now.
        async with session.post(f"{url}/diagnostics/judge/acknowledge") as response:
            assert response.status == 202
        m = await metrics(session, url)
        assert value(m, "ctxprec_judge_changed") == 0
        await poll(lambda: _has(session, url, lambda m: rounds(m, "baseline") >= 2), "a new baseline")
        await app.close()


async def _has(session: aiohttp.ClientSession, url: str, predicate) -> dict | None:
    m = await metrics(session, url)
    return m if predicate(m) else None
