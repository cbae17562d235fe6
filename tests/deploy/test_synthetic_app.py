"""The synthetic RAG app: real OpenTelemetry SDK exporters (OTLP/HTTP and OTLP/gRPC) to a real
receiver; 8 spans per trace with the OpenInference retrieval attributes; two services; the
retriever degrades on time or request count; and the local judge sees precision fall from ~0.9
to ~0.4."""
from __future__ import annotations

import asyncio
from collections import Counter, defaultdict

import pytest
from ctxprec.collector.demo.corpus import (
    NOISY_DOCUMENTS,
    QUESTIONS,
    SERVICES,
    content_words,
    off_topic_pool,
    questions_for,
    shares_content,
)
from ctxprec.collector.demo.synthetic_app import (
    TOP_K,
    AppConfig,
    SyntheticRagApp,
    average_precision,
)
from ctxprec.scorer.judge.local import LocalJudge

from tests.deploy.otlp_sink import OtlpSink

pytestmark = pytest.mark.slow


@pytest.fixture
async def sink():
    receiver = await OtlpSink().start()
    try:
        yield receiver
    finally:
        await receiver.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
async def test_traces_arrive_over_otlp_with_openinference_attributes(sink: OtlpSink, protocol: str) -> None:
    port = sink.http_port if protocol == "http" else sink.grpc_port
    app = SyntheticRagApp(AppConfig(endpoint=f"http://127.0.0.1:{port}", protocol=protocol, rate=50,
                                    duration=0.4, seed=3, export_delay_ms=50))
    try:
        stats = await app.run()
    finally:
        app.shutdown()
    sent = sum(stats.sent.values())
    assert sent >= 10
    await sink.wait_for(8 * sent)
    traces: dict[str, list] = defaultdict(list)
    for span in sink.spans:
        traces[span.trace_id].append(span)
    assert len(traces) == sent
    assert {s.service for s in sink.spans} == set(SERVICES)
    for spans in traces.values():
        assert len(spans) == 8
        assert len({s.service for s in spans}) == 1
        root = [s for s in spans if not s.parent_span_id]
        assert len(root) == 1
        kinds = {s.attributes.get("openinference.span.kind"): s for s in spans}
        retriever, llm = kinds["RETRIEVER"], kinds["LLM"]
        # The LLM span follows the retrieval under the same parent (how the answer is found).
        assert retriever.parent_span_id == llm.parent_span_id == root[0].span_id
        assert llm.start_ns >= retriever.end_ns
        assert root[0].end_ns >= max(s.end_ns for s in spans)
        k = TOP_K[retriever.service]
        docs = [retriever.attributes[f"retrieval.documents.{i}.document.content"] for i in range(k)]
        assert all(isinstance(d, str) and d for d in docs)
        assert f"retrieval.documents.{k}.document.content" not in retriever.attributes
        assert retriever.attributes["retrieval.top_k"] == k
        assert isinstance(retriever.attributes["retrieval.documents.0.document.score"], float)
        assert retriever.attributes["retrieval.documents.0.document.id"]
        question = next(q for q in QUESTIONS if q.query == retriever.attributes["input.value"])
        assert llm.attributes["output.value"] == question.answer
        assert retriever.name == retriever.attributes["retriever"]


def _offline_app(**overrides) -> SyntheticRagApp:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    config = AppConfig(rate=1000, duration=None, **overrides)
    return SyntheticRagApp(config, exporters={s: InMemorySpanExporter() for s in config.services})


def test_degrades_after_a_request_count_for_one_service_only() -> None:
    app = _offline_app(degrade_after_requests=100, seed=1)
    try:
        sent = [app.emit() for _ in range(300)]
    finally:
        app.shutdown()
    assert not any(t.degraded for t in sent[:100])
    assert all(t.degraded == (t.service == "support-bot") for t in sent[100:])
    assert app.stats.degraded_sent == sum(t.degraded for t in sent) == 100


async def test_degrades_after_a_time() -> None:
    app = _offline_app(degrade_after=0.3)
    try:
        early = app.emit()
        await asyncio.sleep(0.35)
        late = [app.emit() for _ in range(2)]
    finally:
        app.shutdown()
    assert not early.degraded
    assert any(t.degraded for t in late)
    assert app.stats.degraded_at is not None and app.stats.degraded_at >= 0.3


def test_same_seed_same_traffic() -> None:
    runs = []
    for _ in range(2):
        app = _offline_app(seed=7, degrade_after_requests=5)
        try:
            runs.append([(t.trace_id, t.contexts) for t in (app.emit() for _ in range(20))])
        finally:
            app.shutdown()
    assert runs[0] == runs[1]


def test_local_judge_sees_precision_fall_from_09_to_04() -> None:
    judge = LocalJudge()
    app = _offline_app(degrade_after_requests=600, seed=11)
    scores: dict[tuple[str, bool], list[float]] = defaultdict(list)
    try:
        for _ in range(1200):
            t = app.emit()
            outcome = judge.judge_sync(t.query, list(t.contexts), reference_kind="output", reference=t.answer)
            got = [v.relevant for v in sorted(outcome.verdicts, key=lambda v: v.index)]
            assert got == list(t.relevant), (t.answer, t.contexts, outcome.verdicts)
            scores[(t.service, t.degraded)].append(average_precision(got))
    finally:
        app.shutdown()
    mean = {k: sum(v) / len(v) for k, v in scores.items()}
    assert 0.85 <= mean[("support-bot", False)] <= 0.97
    assert 0.85 <= mean[("docs-search", False)] <= 0.97
    assert 0.3 <= mean[("support-bot", True)] <= 0.5
    assert ("docs-search", True) not in mean


def test_corpus_relevant_documents_share_words_and_off_topic_ones_do_not() -> None:
    for question in QUESTIONS:
        answer = content_words(question.answer)
        for doc in question.relevant:
            assert len(content_words(doc.content) & answer) >= 2, doc.id
        pool = off_topic_pool(question)
        assert len(pool) >= 4, question.query
        for doc in pool:
            assert not content_words(doc.content) & (answer | content_words(question.query)), doc.id


def test_bad_configuration_is_refused_with_a_clear_message() -> None:
    for overrides, message in [({"protocol": "kafka"}, "protocol"), ({"rate": 0}, "rate"),
                               ({"services": ("nope",)}, "unknown service"),
                               ({"degrade_service": "nope"}, "degrade_service")]:
        with pytest.raises(ValueError, match=message):
            AppConfig(**overrides).validate()


def test_command_line_refuses_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from ctxprec.collector.demo import synthetic_app

    with pytest.raises(SystemExit) as exc:
        synthetic_app.main(["--rate", "-1"])
    assert exc.value.code == 2
    assert "rate must be > 0" in capsys.readouterr().err


def test_planted_noisy_documents_share_nothing_with_their_services_questions() -> None:
    judge = LocalJudge()
    for service in SERVICES:
        assert len(NOISY_DOCUMENTS[service]) >= 2
        for doc in NOISY_DOCUMENTS[service]:
            for question in questions_for(service):
                assert not shares_content(doc.content, f"{question.query} {question.answer}"), (doc.id, question.query)
                outcome = judge.judge_sync(question.query, [doc.content], reference_kind="output",
                                           reference=question.answer)
                assert not outcome.verdicts[0].relevant, (doc.id, question.query, outcome.verdicts[0].reason)


def test_noisy_documents_are_the_most_often_irrelevant_and_docs_search_needs_only_3_contexts() -> None:
    """What the diagnostics should find in the demo: the planted documents top the irrelevant
    counts of their service, and docs-search's 6 contexts hold 95% of the relevant ones in 3."""
    judge = LocalJudge()
    app = _offline_app(seed=4)
    irrelevant: dict[str, Counter[str]] = defaultdict(Counter)
    relevant_at: dict[str, Counter[int]] = defaultdict(Counter)
    try:
        for _ in range(2000):
            t = app.emit()
            outcome = judge.judge_sync(t.query, list(t.contexts), reference_kind="output", reference=t.answer)
            assert [v.relevant for v in sorted(outcome.verdicts, key=lambda v: v.index)] == list(t.relevant)
            for rank, (doc_id, rel) in enumerate(zip(t.document_ids, t.relevant), start=1):
                if rel:
                    relevant_at[t.service][rank] += 1
                else:
                    irrelevant[t.service][doc_id] += 1
    finally:
        app.shutdown()
    for service in SERVICES:
        planted = {d.id for d in NOISY_DOCUMENTS[service]}
        assert {doc for doc, _ in irrelevant[service].most_common(len(planted))} == planted
    ranks = relevant_at["docs-search"]
    total = sum(ranks.values())
    assert sum(ranks[r] for r in (1, 2, 3)) / total >= 0.95
    assert 0 < ranks[5] + ranks[6] < 0.05 * total and ranks[4] == 0
