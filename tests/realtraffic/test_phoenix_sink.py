"""`--sink phoenix=URL` against a real Arize Phoenix server (the test session's, in its own venv).

A real instrumented framework app sends its trace to `ctxprec serve` in span mode, which forwards
every span to Phoenix and writes each score into Phoenix's annotation store; the test reads back
through Phoenix's own API: one `context_precision` span annotation per scored span, with the
score, label, reason, annotator kind and identifier, and, for an OpenInference app, one
`relevance` document annotation per judged context at its position. A second sidecar scoring
the same spans again replaces the annotations instead of adding to them.

Then an outage: Phoenix's API cut for 30 s (a TCP proxy in front of it taken down) while traffic
goes on. Scoring and span forwarding carry on as before, the annotations of that time arrive
after Phoenix is back, and a sidecar whose deadline is shorter than the outage counts them as
dropped instead.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable
from urllib.parse import urlsplit

import aiohttp
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from ctxprec.collector.exporters.attributes import score_label
from ctxprec.collector.model import Outcome
from ctxprec.collector.pipeline import Pipeline
from ctxprec.collector.stub_judge import StubJudge
from tests.chaos.tcp_proxy import TcpProxy
from tests.collector.rag_app import RagApp, running, scrape, serve_config, value, wait_until
from tests.helpers.framework_apps import run_app
from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.phoenix import PhoenixClient, PhoenixServer, poll

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]


class Outcomes:
    def __init__(self) -> None:
        self.items: list[Outcome] = []

    def emit(self, outcome: Outcome) -> None:
        self.items.append(outcome)

    def by_span(self) -> dict[str, Outcome]:
        return {o.retrieval.span_id: o for o in self.items if o.result is not None}


def judge(stub: StubJudge) -> list[str]:
    return ["--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k"]


async def metrics_of(pipeline: Pipeline) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{pipeline.metrics_url}/metrics") as response:
            return scrape(await response.text())


async def replay(bodies: list[bytes], port: int) -> None:
    async with aiohttp.ClientSession() as session:
        for body in bodies:
            async with session.post(f"http://127.0.0.1:{port}/v1/traces", data=body,
                                    headers={"Content-Type": "application/x-protobuf"}) as response:
                assert response.status == 200


@pytest.mark.parametrize(("framework", "instrumentor"), [("langchain", "openinference"),
                                                         ("llamaindex", "openllmetry")])
async def test_scores_become_phoenix_annotations_and_a_rescore_replaces_them(
        framework: str, instrumentor: str, make_stub_judge: MakeStub, phoenix_server: PhoenixServer) -> None:
    stub = await make_stub_judge()
    client = PhoenixClient(phoenix_server.url)
    project = f"rt-sink-{framework}-{instrumentor}"
    sink = f"phoenix={phoenix_server.url}"
    capture = await OtlpCapture().start()
    outcomes, rescored = Outcomes(), Outcomes()
    try:
        async with running(serve_config(*judge(stub), "--forward-to", phoenix_server.url, "--write-back", "span",
                                        "--sink", sink)) as pipeline:
            pipeline.add_sink(outcomes)
            runs = await run_app(framework, instrumentor, "direct", service="shop-api", project=project,
                                 endpoints=[f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces",
                                            f"{capture.http_url}/v1/traces"])
            await wait_until(lambda: len(outcomes.by_span()) >= len(runs), timeout=30, what="every retrieval scored")
            span_ids = sorted(outcomes.by_span())
            first = await poll(lambda: client.span_annotations(project, span_ids),
                               lambda rows: len(rows) >= len(span_ids), 60, "the span annotations")
            # Document annotations go in their own request: stored in their own time.
            expected_documents = {s: outcomes.by_span()[s].result.k if instrumentor == "openinference" else 0  # type: ignore[union-attr]
                                  for s in span_ids}
            documents = await poll(lambda: client.document_annotations(span_ids),
                                   lambda found: {s: len(found[s]) for s in span_ids} == expected_documents, 60,
                                   "the document annotations")
            figures = await metrics_of(pipeline)
            identifier = pipeline.identity.identifier
        assert len(span_ids) == len(runs) == 3

        # One span annotation per scored span, saying what the score says.
        assert sorted(a["span_id"] for a in first) == span_ids
        for annotation in first:
            result = outcomes.by_span()[annotation["span_id"]].result
            assert result is not None
            assert annotation["name"] == "context_precision"
            assert annotation["result"] == {"score": result.score, "label": score_label(result, 0.5),
                                            "explanation": result.reason}
            assert annotation["annotator_kind"] == "LLM" and annotation["identifier"] == identifier
            assert annotation["metadata"]["k"] == result.k and annotation["metadata"]["judge_model"] == "openai/stub"

        # OpenInference: one relevance annotation per judged context, at its position.
        # Other conventions: Phoenix has no document list to place them in, so none.
        for span_id in span_ids:
            result = outcomes.by_span()[span_id].result
            assert result is not None
            if instrumentor == "openinference":
                rows = sorted(documents[span_id], key=lambda d: d["documentPosition"])
                assert [d["documentPosition"] for d in rows] == list(range(result.k))
                assert [d["score"] for d in rows] == [1.0 if v.relevant else 0.0 for v in result.verdicts]
                assert [d["label"] for d in rows] == ["relevant" if v.relevant else "irrelevant"
                                                      for v in result.verdicts]
                assert [d["explanation"] for d in rows] == [v.reason for v in result.verdicts]
                assert all(d["name"] == "relevance" and d["annotatorKind"] == "LLM" for d in rows)
            else:
                assert documents[span_id] == []
        per_span = {s: 1 + len(documents[s]) for s in span_ids}
        print(f"\nFIGURE phoenix annotations per scored span ({framework}/{instrumentor}): "
              f"{per_span} (k = {[outcomes.by_span()[s].result.k for s in span_ids]})")  # type: ignore[union-attr]
        assert value(figures, "ctxprec_exported_spans_total", exporter="phoenix", outcome="ok") == 3
        assert sum(v for (name, labels), v in figures.items()
                   if name == "ctxprec_export_dropped_total" and ("exporter", "phoenix") in labels) == 0

        # The same spans scored again (another sidecar, a stricter label threshold): the
        # annotations are replaced, not added.
        async with running(serve_config(*judge(stub), "--sink", sink, "--threshold", "1.0")) as second:
            second.add_sink(rescored)
            await replay(capture.bodies, second.otlp_http_port or 0)
            await wait_until(lambda: len(rescored.by_span()) >= 3, timeout=30, what="the re-scores")
            await wait_until(lambda: second.sinks[0].queue.pending == 0, timeout=30, what="the re-written annotations")
        # Delivered is not yet readable: wait for the re-written labels and documents.
        relabelled = {s: score_label(o.result, 1.0) for s, o in rescored.by_span().items() if o.result is not None}
        again = await poll(lambda: client.span_annotations(project, span_ids),
                           lambda rows: {a["span_id"]: a["result"]["label"] for a in rows} == relabelled, 60,
                           "the re-written span annotations")
        documents_again = await poll(lambda: client.document_annotations(span_ids),
                                     lambda found: {s: len(found[s]) for s in span_ids} == expected_documents, 60,
                                     "the re-written document annotations")
        assert sorted(a["id"] for a in again) == sorted(a["id"] for a in first)
        for annotation in again:
            result = rescored.by_span()[annotation["span_id"]].result
            assert result is not None
            assert annotation["result"]["label"] == score_label(result, 1.0)
        assert {s: sorted(d["id"] for d in documents_again[s]) for s in span_ids} == {
            s: sorted(d["id"] for d in documents[s]) for s in span_ids}
    finally:
        await capture.stop()


async def test_annotations_sent_before_their_span_is_stored_arrive_once_it_is(
        make_stub_judge: MakeStub, phoenix_server: PhoenixServer) -> None:
    """The sink learns of a score before Phoenix stores the span (Phoenix answers 404, batch
    and all): the annotations wait and go once the span is there, the others are not held up."""
    stub = await make_stub_judge()
    client = PhoenixClient(phoenix_server.url)
    held_back = await OtlpCapture().start()
    outcomes = Outcomes()
    try:
        # The app's spans reach Phoenix only when the test says so: ctxprec forwards to a capture.
        async with running(serve_config(*judge(stub), "--forward-to", held_back.http_url,
                                        "--sink", f"phoenix={phoenix_server.url}")) as pipeline:
            pipeline.add_sink(outcomes)
            app = RagApp(protocol="http", port=pipeline.otlp_http_port or 0, service="late-spans")
            for i in range(4):
                app.openinference(f"question {i}", [f"[relevant] passage {i}", "[irrelevant] filler"], "an answer")
            await app.flush()
            await wait_until(lambda: len(outcomes.by_span()) == 4, timeout=30, what="4 scores")
            await asyncio.sleep(2.0)  # the sink tried, and Phoenix said 404
            figures = await metrics_of(pipeline)
            assert value(figures, "ctxprec_exported_spans_total", exporter="phoenix", outcome="ok") == 0
            # Two of the scored spans reach Phoenix now: their annotations go, the others wait.
            await held_back.wait_for_spans(12)
            span_ids = sorted(outcomes.by_span())
            early, late = span_ids[:2], span_ids[2:]
            await replay_to_phoenix([only(held_back.bodies, lambda span_id: span_id not in late)], phoenix_server)
            rows = await poll(lambda: client.span_annotations("default", span_ids),
                              lambda found: len(found) >= 2, 30, "the 2 annotations whose spans are stored")
            assert sorted(r["span_id"] for r in rows) == early
            await asyncio.sleep(1.0)
            await replay_to_phoenix([only(held_back.bodies, lambda span_id: span_id in late)], phoenix_server)
            rows = await poll(lambda: client.span_annotations("default", span_ids),
                              lambda found: len(found) == 4, 30, "all 4 span annotations")
            await app.close()
            figures = await metrics_of(pipeline)
        assert value(figures, "ctxprec_exported_spans_total", exporter="phoenix", outcome="ok") == 4
        assert sorted(r["span_id"] for r in rows) == span_ids
        documents = await poll(lambda: client.document_annotations(span_ids),
                               lambda found: all(len(found[s]) == 2 for s in span_ids), 30, "the document annotations")
        assert all(len(documents[s]) == 2 for s in span_ids)
    finally:
        await held_back.stop()


def only(bodies: list[bytes], keep: Callable[[str], bool]) -> bytes:
    """One export request with the spans of `bodies` whose id `keep` keeps (resources as sent)."""
    out = ExportTraceServiceRequest()
    for body in bodies:
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
            for ss in rs.scope_spans:
                kept = [span for span in ss.spans if keep(span.span_id.hex())]
                del ss.spans[:]
                ss.spans.extend(kept)
            out.resource_spans.append(rs)
    return out.SerializeToString()


async def replay_to_phoenix(bodies: list[bytes], server: PhoenixServer) -> None:
    async with aiohttp.ClientSession() as session:
        for body in bodies:
            async with session.post(server.otlp_http_traces_url, data=body,
                                    headers={"Content-Type": "application/x-protobuf"}) as response:
                assert response.status == 200


OUTAGE_S = 30.0


async def test_a_30s_phoenix_outage_stalls_nothing_and_its_annotations_arrive_after(
        make_stub_judge: MakeStub, phoenix_server: PhoenixServer) -> None:
    stub = await make_stub_judge()
    client = PhoenixClient(phoenix_server.url)
    proxy = TcpProxy(urlsplit(phoenix_server.url).port or 0)
    await proxy.up()
    service = "outage-app"
    patient, impatient = Outcomes(), Outcomes()
    # `patient` forwards its spans straight to Phoenix and annotates through the proxy;
    # `impatient` only annotates, through the proxy, and gives up on a score after 5 s.
    async with running(serve_config(*judge(stub), "--forward-to", phoenix_server.url,
                                    "--sink", f"phoenix={proxy.url}")) as pipeline, \
            running(serve_config(*judge(stub), "--sink", f"phoenix={proxy.url}", "--sink-deadline", "5")) as short:
        pipeline.add_sink(patient)
        short.add_sink(impatient)
        app = RagApp(protocol="http", port=pipeline.otlp_http_port or 0, service=service)
        mirror = RagApp(protocol="http", port=short.otlp_http_port or 0, service=service)
        # Before: the sink works.
        app.openinference("warm-up", ["[relevant] passage", "[irrelevant] filler"], "an answer")
        await app.flush()
        await wait_until(lambda: len(patient.by_span()) == 1, timeout=30, what="the warm-up score")
        warm = list(patient.by_span())
        await poll(lambda: client.span_annotations("default", warm), lambda rows: len(rows) == 1, 30,
                   "the warm-up annotation")

        await proxy.down()
        down_at = time.monotonic()
        sent: list[str] = []
        scored_during: list[float] = []
        # Traffic stops 10 s before the end, so that every score of `impatient` (deadline 5 s,
        # 1 s linger) expires while Phoenix is still down: its spans are not in Phoenix, and once
        # it is back they would be dropped as span_not_found instead.
        while time.monotonic() - down_at < OUTAGE_S - 10.0:
            for _ in range(2):
                question = f"outage question {len(sent)}"
                docs = [f"[relevant] passage {len(sent)}", "[irrelevant] filler", "[relevant] more"]
                sent.append(app.openinference(question, docs, "an answer").retriever_span_id)
                mirror.openinference(question, docs, "an answer")
            await app.flush()
            await mirror.flush()
            began = time.monotonic()
            await wait_until(lambda: len(patient.by_span()) == len(sent) + 1, timeout=10, what="scoring during the outage")
            scored_during.append(time.monotonic() - began)
            await asyncio.sleep(2.5)
        # Nothing else stalled: every trace was scored within seconds and its spans reached Phoenix.
        assert max(scored_during) < 5.0
        stored = await poll(lambda: client.spans("default", span_id=sent), lambda rows: len(rows) == len(sent), 30,
                            "the forwarded spans during the outage")
        assert len(stored) == len(sent)
        during = await metrics_of(pipeline)
        assert value(during, "ctxprec_exported_spans_total", exporter="phoenix", outcome="ok") == 1  # the warm-up
        await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))

        await proxy.up()
        up_at = time.monotonic()
        rows = await poll(lambda: client.span_annotations("default", sent), lambda found: len(found) == len(sent), 60,
                          "the annotations of the outage")
        # Document annotations go in the request after their span annotations.
        await poll(lambda: client.document_annotations(sent), lambda found: all(len(found[s]) == 3 for s in sent),
                   30, "3 document annotations per span")
        arrived_after = time.monotonic() - up_at
        await wait_until(lambda: len(impatient.by_span()) == len(sent), timeout=10, what="the mirror's scores")
        await wait_until(lambda: short.sinks[0].queue.pending == 0, timeout=10, what="the mirror's queue")
        after = await metrics_of(pipeline)
        short_figures = await metrics_of(short)
        await app.close()
        await mirror.close()
    await proxy.down()
    dropped = {dict(labels)["reason"]: v for (name, labels), v in short_figures.items()
               if name == "ctxprec_export_dropped_total" and ("exporter", "phoenix") in labels and v}
    print(f"\nFIGURE phoenix outage {OUTAGE_S:.0f}s: {len(sent)} scores during it, scoring latency max "
          f"{max(scored_during):.2f}s, all {len(rows)} annotations in Phoenix {arrived_after:.1f}s after it "
          f"ended (deadline 120 s); with a 5 s deadline: dropped {dropped}")
    assert len(rows) == len(sent)
    assert value(after, "ctxprec_exported_spans_total", exporter="phoenix", outcome="ok") == len(sent) + 1
    assert sum(v for (name, labels), v in after.items()
               if name == "ctxprec_export_dropped_total" and ("exporter", "phoenix") in labels) == 0
    # The impatient sidecar: every score of the outage counted as dropped, by reason.
    assert dropped == {"unavailable": len(sent)}


# Phoenix's rules for both: at least 32 characters, a digit and a lower-case letter.
PHOENIX_SECRET = "ctxprec-test-secret-0123456789-abcdef"
PHOENIX_ADMIN_SECRET = "ctxprec-test-admin-9876543210-fedcba"


async def test_a_phoenix_with_auth_on_takes_spans_and_annotations_with_its_api_key(
        make_stub_judge: MakeStub, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Spans forwarded with `--forward-header 'Authorization=Bearer ${PHOENIX_API_KEY}'`, annotations
    with the same key read by the sink itself; without a key both are refused and counted."""
    stub = await make_stub_judge()
    server = PhoenixServer(extra_env={"PHOENIX_ENABLE_AUTH": "true", "PHOENIX_SECRET": PHOENIX_SECRET,
                                      "PHOENIX_ADMIN_SECRET": PHOENIX_ADMIN_SECRET})
    await asyncio.to_thread(server.start)
    try:
        admin = PhoenixClient(server.url, api_key=PHOENIX_ADMIN_SECRET)
        created = await asyncio.to_thread(admin.request, "POST", "/v1/system/api_keys",
                                          body={"data": {"name": "ctxprec-test"}})
        key = created.json()["data"]["key"]
        monkeypatch.setenv("PHOENIX_API_KEY", key)
        caplog.set_level(logging.DEBUG)
        outcomes = Outcomes()
        async with running(serve_config(*judge(stub), "--forward-to", server.url,
                                        "--forward-header", "Authorization=Bearer ${PHOENIX_API_KEY}",
                                        "--sink", f"phoenix={server.url}")) as pipeline:
            pipeline.add_sink(outcomes)
            app = RagApp(protocol="http", port=pipeline.otlp_http_port or 0, service="authed")
            for i in range(2):
                app.openinference(f"question {i}", [f"[relevant] passage {i}", "[irrelevant] filler"], "an answer")
            await app.flush()
            await app.close()
            await wait_until(lambda: len(outcomes.by_span()) == 2, timeout=30, what="2 scores")
            span_ids = sorted(outcomes.by_span())
            rows = await poll(lambda: admin.span_annotations("default", span_ids), lambda found: len(found) == 2, 60,
                              "2 span annotations in the authenticated Phoenix")
        assert sorted(r["span_id"] for r in rows) == span_ids

        # No key: Phoenix answers 401 to both, and the sink counts its scores as unauthorized.
        monkeypatch.delenv("PHOENIX_API_KEY")
        async with running(serve_config(*judge(stub), "--forward-to", server.url,
                                        "--sink", f"phoenix={server.url}")) as keyless:
            app = RagApp(protocol="http", port=keyless.otlp_http_port or 0, service="keyless")
            app.openinference("question", ["[relevant] passage", "[irrelevant] filler"], "an answer")
            await app.flush()
            await app.close()

            async def refused() -> float:
                figures = await metrics_of(keyless)
                return value(figures, "ctxprec_export_dropped_total", exporter="phoenix", reason="unauthorized")

            deadline = time.monotonic() + 30
            while await refused() < 1:
                assert time.monotonic() < deadline, "the keyless score was not counted as unauthorized"
                await asyncio.sleep(0.2)
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert key not in logged and PHOENIX_ADMIN_SECRET not in logged
    finally:
        await asyncio.to_thread(server.cleanup)
