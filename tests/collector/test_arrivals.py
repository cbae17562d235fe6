"""Traces as they really arrive, end to end: every retrieval decided exactly once, with its answer
when it came in time, every acknowledged span forwarded (issue 32's table, times shortened by
settings where the case allows).

The real OpenTelemetry SDK exporters (OTLP/HTTP and gRPC) send captured LangChain/OpenInference
traces (tests/helpers/arrivals.py) into `ctxprec serve` (span mode, the stub judge over HTTP),
which forwards to a real OTLP receiver. Settings: quiet period 0.2 s, answer wait 3 s.
"""
from __future__ import annotations

from typing import Awaitable, Callable

import aiohttp
import pytest
from ctxprec.collector.stub_judge import StubJudge

from tests.collector.rag_app import running, scrape, serve_config, value, wait_until
from tests.helpers import arrivals
from tests.helpers.otlp_capture import OtlpCapture

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]
TRACES = 6
ANSWER_WAIT_S = 3.0


async def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/metrics") as response:
            return scrape(await response.text())


async def test_every_retrieval_is_decided_once_whatever_the_arrival(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture(record_bodies=False).start()
    cases = {c.name: c for c in [
        arrivals.late_retrieval(TRACES, 1.5),  # after its trace was assembled (quiet 0.2 s)
        arrivals.late_answer(TRACES, 1.5, name="late_answer_in_time"),  # within the answer wait
        arrivals.late_answer(TRACES, ANSWER_WAIT_S + 2.0, name="late_answer_too_late"),
        arrivals.agent_steps(12, 1.0, root_at_end=False, name="never_ending"),  # past max_wait (5 s)
        arrivals.agent_steps(60, 0.1, root_at_end=True, name="spread", per_send=2),
        arrivals.resent(TRACES, 0.3),
        arrivals.resent(TRACES, 0.0, name="resend_at_once"),
    ]}
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k",
                          "--forward-to", capture.http_url, "--write-back", "span", "--sample-rate", "1",
                          "--answer-wait", str(ANSWER_WAIT_S))
    try:
        async with running(config) as pipeline:
            exporters = arrivals.Exporters(pipeline.otlp_http_port, pipeline.otlp_grpc_port)
            try:
                acknowledged = await arrivals.send_all(list(cases.values()), exporters)
            finally:
                exporters.close()
            assert acknowledged == {name: case.spans_sent for name, case in cases.items()}
            total_sent = sum(acknowledged.values())
            retrievals = sum(len(c.retrievals) for c in cases.values())
            await wait_until(lambda: len(capture.spans) >= total_sent, timeout=60, what="every span forwarded")
            decided: list[float] = []

            async def all_decided() -> bool:
                samples = await metrics(pipeline.metrics_url)
                decided.append(sum(v for (name, _), v in samples.items() if name == "ctxprec_samples_total"))
                return decided[-1] >= retrievals

            await wait_until_async(all_decided, timeout=60, what="a decision per retrieval")
            samples = await metrics(pipeline.metrics_url)
            tallies = {name: arrivals.tally(case, samples, capture.spans) for name, case in cases.items()}
            for name, t in tallies.items():
                # decisions == retrievals seen, each retrieval span forwarded as often as it was
                # acknowledged, every copy with the one score.
                assert t.decisions == t.retrievals, (name, t)
                assert t.decisions_by_kind == {"evaluated": t.retrievals}, (name, t)
                assert t.spans_forwarded == t.spans_sent, (name, t)
                assert t.scored_retrievals == t.retrievals, (name, t)
                assert t.retrieval_copies_scored == t.retrieval_copies_sent, (name, t)
            assert tallies["late_answer_in_time"].answers_used == TRACES
            assert tallies["late_answer_too_late"].answers_used == 0
            assert tallies["late_retrieval"].answers_used == TRACES
            assert tallies["resend"].retrieval_copies_sent == 2 * TRACES
            assert value(samples, "ctxprec_late_answers_total") == TRACES
            assert value(samples, "ctxprec_resent_spans_total") == (
                cases["resend"].spans_sent // 2 + cases["resend_at_once"].spans_sent // 2)
            assert value(samples, "ctxprec_late_spans_joined_total") >= TRACES
            assert value(samples, "ctxprec_late_spans_total") == 0
            assert value(samples, "ctxprec_exported_spans_total", exporter="span_hold", outcome="expired") == 0
    finally:
        await capture.stop()


async def wait_until_async(predicate: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)
