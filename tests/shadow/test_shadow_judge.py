"""The shadow judge: the stub judge live and the real llama.cpp server (SmolLM2) as the shadow,
both behind recording proxies. The agreement `/diagnostics/judge` shows for the shadow against the
live judge equals the agreement computed here from the two judges' own recorded answers; the
shadow's verdicts never reach the published scores, and its requests are counted under
judge="shadow"."""
from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from ctxprec.scorer.agreement import Confusion
from ctxprec.scorer.judge.prompt import BEGIN_DATA, END_DATA
from tests.collector.rag_app import RagApp, running, scrape, serve_config, value
from tests.llm_judge.server import MODEL_ALIAS, LlamaServer
from tests.shadow.recording_proxy import RecordingProxy

pytestmark = pytest.mark.slow

RETRIEVALS = 4
ANSWER = "Open Settings, choose Security and click Reset Password; the emailed link expires after 30 minutes."


def retrieval(i: int) -> tuple[str, list[str]]:
    return (f"Question {i}: how do I reset my password?",
            [f"To reset a password (case {i}) open Settings and choose Security.",
             f"Our offices (case {i}) are closed on public holidays.",
             f"The emailed reset link (case {i}) expires after 30 minutes."])


def said(exchanges) -> dict[tuple[str, str], bool]:
    """(query, context text) -> the verdict, read from a judge's answers as it wrote them (a
    re-ask's answer for an index replaces nothing: it asks only for indices still missing)."""
    verdicts: dict[tuple[str, str], bool] = {}
    for request, status, answer in exchanges:
        if status != 200 or not answer:
            continue
        content = request["messages"][-1]["content"]
        start = content.rfind(BEGIN_DATA + "\n") + len(BEGIN_DATA) + 1
        data = json.loads(content[start:content.find("\n" + END_DATA, start)])
        if data.get("task", "verdicts") != "verdicts":
            continue
        texts = {c["context_index"]: c["text"] for c in data["contexts"]}
        try:
            items = json.loads(answer["choices"][0]["message"]["content"])["verdicts"]
        except (ValueError, KeyError, TypeError):
            continue
        for item in items:
            if isinstance(item, dict) and item.get("context_index") in texts and item.get("verdict") in ("yes", "no"):
                verdicts.setdefault((data["query"], texts[item["context_index"]]), item["verdict"] == "yes")
    return verdicts


@pytest.fixture(scope="module")
def llama():
    server = LlamaServer().start()
    try:
        yield server
    finally:
        server.stop()


async def test_shadow_agreement_equals_the_one_computed_from_both_judges_answers(stub_judge, llama) -> None:
    live, shadow = await RecordingProxy(stub_judge.url).start(), await RecordingProxy(llama.url).start()
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", live.url, "--judge-api-key", "k",
                          "--judge-canary-mode", "off", "--shadow-judge-model", f"openai/{MODEL_ALIAS}",
                          "--shadow-judge-api-base", shadow.url, "--shadow-judge-api-key", "unused",
                          "--shadow-sample-rate", "1", "--shadow-max-in-flight", str(RETRIEVALS))
    try:
        async with running(config) as pipeline, aiohttp.ClientSession() as session:
            url = pipeline.metrics_url
            assert pipeline.shadow is not None
            app = RagApp(protocol="http", port=pipeline.otlp_http_port)
            for i in range(RETRIEVALS):
                query, docs = retrieval(i)
                app.openinference(query, docs, ANSWER)
            await app.flush()
            await app.close()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 600  # SmolLM2 on one thread of a shared 2-core machine
            while True:
                async with session.get(f"{url}/diagnostics/judge") as response:
                    view = await response.json()
                done = view["sections"]["shadow"]["samples"]
                if done["judged"] + done["failed"] >= RETRIEVALS:
                    break
                assert loop.time() < deadline, f"the shadow judge did not finish: {view['sections']['shadow']}"
                await asyncio.sleep(0.5)
            async with session.get(f"{url}/metrics") as response:
                m = scrape(await response.text())
    finally:
        await live.stop()
        await shadow.stop()

    assert done["judged"] >= 1, view["sections"]["shadow"]
    live_said, shadow_said = said(live.exchanges), said(shadow.exchanges)
    expected = Confusion()
    for key, verdict in shadow_said.items():
        if key in live_said:
            expected.add(verdict, live_said[key])
    fingerprint = view["sections"]["shadow"]["judge"]
    entry = next(e for e in view["agreement"] if e["judge"] == fingerprint and e["against"] == "live")
    assert entry["contexts"] == expected.total == 3 * done["judged"]
    assert entry["agreement"] == round(expected.agreement, 4)
    assert entry["kappa"] == (None if expected.kappa is None else round(expected.kappa, 4))
    assert entry["confusion"] == expected.as_dict()["confusion"]
    assert value(m, "ctxprec_judge_agreement_ratio", judge=fingerprint, against="live") == pytest.approx(
        expected.agreement)
    # Its requests are its own; the published scores are the live judge's alone.
    assert value(m, "ctxprec_judge_requests_total", model=f"openai/{MODEL_ALIAS}", outcome="ok", judge="shadow") >= 1
    assert value(m, "ctxprec_judge_requests_total", model=f"openai/{MODEL_ALIAS}", outcome="ok", judge="live") == 0
    assert value(m, "ctxprec_samples_total", service="support-bot", decision="evaluated") == RETRIEVALS
    # Every live context was relevant or not as the stub says; the precision histogram counts only those.
    assert value(m, "ctxprec_rank_judged_total", service="support-bot", rank="2", relevant="false") == RETRIEVALS
