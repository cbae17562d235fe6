"""Documents known by id, looked up in real stores: PostgreSQL, Redis (string and hash), Chroma and
Milvus Lite servers started here on 127.0.0.1, and the app's own HTTP endpoint, each holding the
corpus. The traffic is a real app traced by the OpenTelemetry GenAI utility in SPAN_ONLY mode: its
retrieval spans carry `{id, score}` documents, no text.

For every kind: each retrieval is scored with the same verdicts, score and judge calls as
`ctxprec score` gives the same question, texts and answer; its span and record say
`documents_resolved`, and no text is written back. A sidecar without a resolver decides the same
retrievals `no_content`. Then what goes wrong: a missing id, a source that times out, one that
goes down mid-run (and comes back), an id holding SQL, and the start-up checks."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

import asyncpg
import pytest

from ctxprec.collector.model import Decision
from ctxprec.collector.pipeline import Pipeline
from ctxprec.collector.resolving.config import ResolverConfig
from ctxprec.collector.resolving.stage import DocumentResolver, ResolverStartError
from ctxprec.collector.stub_judge import StubJudge
from tests.collector.rag_app import running, scrape, serve_config, value, wait_until
from tests.helpers.framework_apps import AppRun, run_app_module
from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.scored_like_batch import BatchScores, Outcomes, judge_flags, metrics_text
from tests.resolving.stores_fixture import (
    CORPUS,
    KINDS,
    PASSWORD_ENV,
    READER_PASSWORD,
    Decisions,
    DocumentEndpoint,
    Queue,
    Stores,
    ids_only,
    dumped,
    outcome_verdicts,
    resolver_config,
    start_stores,
)

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]
SPAN_ONLY = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"}
batch = BatchScores()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    started = start_stores(tmp_path_factory.mktemp("stores"))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
async def http_store(stores: Stores) -> AsyncIterator[DocumentEndpoint]:
    server = await DocumentEndpoint(CORPUS).start()
    stores.http_url = server.url
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(autouse=True)
def reader_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, READER_PASSWORD)


async def traffic(pipelines: list[Pipeline], service: str, expected: int = 3) -> list[AppRun]:
    """The GenAI utility app's three questions, sent to each sidecar; returns once each decided all."""
    runs = await run_app_module("genai_util_app", service=service, env=SPAN_ONLY,
                                endpoints=[f"http://127.0.0.1:{p.otlp_http_port}/v1/traces" for p in pipelines])
    assert len(runs) == 3
    for pipeline in pipelines:
        await wait_until(lambda p=pipeline: sum(p.fanout.counts.values()) >= expected, timeout=30,
                         what="a decision for every retrieval")
    await asyncio.sleep(0.3)  # a second (wrong) decision would show up now
    return runs


@pytest.mark.parametrize("kind", KINDS)
async def test_ids_only_retrievals_are_scored_as_the_same_retrievals_with_their_text(
        kind: str, stores: Stores, http_store: DocumentEndpoint, make_stub_judge: MakeStub, tmp_path: Path) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    service = f"resolved-{kind}"
    config = resolver_config(tmp_path, [stores.source(kind)], *judge_flags(stub), "--forward-to", capture.http_url,
                             "--write-back", "span")
    outcomes = Outcomes()
    try:
        async with running(config) as pipeline, running(serve_config(*judge_flags(stub))) as plain:
            pipeline.add_sink(outcomes)
            runs = await traffic([pipeline, plain], service)
            await wait_until(lambda: len(capture.find_spans("gen_ai.evaluation.name", "context_precision")) >= 3,
                             timeout=30, what="scored spans downstream")
            metrics = scrape(await metrics_text(pipeline))
        assert pipeline.fanout.counts == {"evaluated": 3}
        assert plain.fanout.counts == {"no_content": 3}  # the same spans, no resolver
        records = await batch.records(stub, runs, tmp_path)
        by_query = {o.retrieval.query: o for o in outcomes.items}
        for run in runs:
            outcome = by_query[run.query]
            r, record, text_record = outcome.retrieval, outcome.record, records[run.query]
            assert outcome.result is not None and record is not None
            assert r.documents_resolved and r.convention == "genai"
            assert [c.content for c in r.contexts] == run.contexts  # the texts, in rank order
            assert [c.id for c in r.contexts] == run.context_ids
            assert all(c.score is not None for c in r.contexts)
            # Judged exactly as the same retrieval with its text: verdicts, score, judge calls.
            assert outcome_verdicts(record) == outcome_verdicts(text_record)
            assert (record["score"], record["reference_kind"]) == (text_record["score"], "output")
            assert record["judge"]["calls"] == text_record["judge"]["calls"]
            assert record["documents_resolved"] is True
            assert [v["document"] for v in record["verdicts"]] == run.context_ids
            scored = capture.span(r.span_id)
            assert scored is not None and scored.attributes["ctxprec.documents_resolved"] is True
            written = dumped(scored.attributes)
            assert not any(text in written for text in run.contexts), "resolved text written back to the span"
        source = f"kb-{kind}"
        assert value(metrics, "ctxprec_resolver_lookups_total", source=source, outcome="ok") >= 1
        # Each distinct id is looked up once: in one batch, or answered from the cache after.
        distinct = {i for run in runs for i in run.context_ids}
        assert value(metrics, "ctxprec_resolver_ids_total", source=source, outcome="found") == len(distinct) == 7
        assert value(metrics, "ctxprec_resolver_ids_total", source=source, outcome="missing") == 0
        assert value(metrics, "ctxprec_samples_total", service=service, decision="evaluated") == 3
    finally:
        await capture.stop()


def _decided(outcomes: Outcomes, start: int = 0) -> dict[str, tuple[str, str | None]]:
    """Query -> (decision, unresolved reason) of the outcomes from `start` on."""
    return {o.retrieval.query: (o.decision.value, o.error[0] if o.error else None) for o in outcomes.items[start:]}


async def test_missing_ids_a_source_down_mid_run_and_back_are_unresolved_with_their_reason(
        stores: Stores, make_stub_judge: MakeStub, tmp_path: Path) -> None:
    """kb-04 deleted: the two retrievals ranking it are `unresolved` (missing), never judged on the
    rest; the third is scored. PostgreSQL stopped: the two that need a lookup are `unresolved`
    (error), the third is scored from the cache. Started again: looked up again. Every span still
    goes downstream; every retrieval one decision."""
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    config = resolver_config(tmp_path, [stores.source("postgres", breaker_threshold=2, breaker_cooldown_s=0.5)],
                             *judge_flags(stub), "--forward-to", capture.http_url, "--write-back", "span")
    outcomes = Outcomes()
    await _superuser(stores, "DELETE FROM documents WHERE id = 'kb-04'")
    try:
        async with running(config) as pipeline:
            pipeline.add_sink(outcomes)
            runs = await traffic([pipeline], "resolver-faults")
            missing = _decided(outcomes)
            assert sorted(missing.values()) == [("evaluated", None), ("unresolved", "missing"),
                                                ("unresolved", "missing")]
            assert missing[runs[2].query] == ("evaluated", None)  # q3 does not rank kb-04
            assert stub.stats.requests == 1  # nothing judged on a partial list (one call per judged retrieval)

            stores.postgres.stop()
            await traffic([pipeline], "resolver-faults", expected=6)
            down = _decided(outcomes, 3)
            assert down[runs[2].query] == ("evaluated", None)  # its texts were cached
            assert [down[r.query] for r in runs[:2]] == [("unresolved", "error")] * 2

            stores.postgres.start()
            await asyncio.sleep(0.6)  # the breaker's cooldown
            await traffic([pipeline], "resolver-faults", expected=9)
            assert _decided(outcomes, 6) == missing
            metrics = scrape(await metrics_text(pipeline))
            await wait_until(lambda: len(capture.spans) >= 27, timeout=30, what="every span forwarded")
        assert pipeline.fanout.counts == {"evaluated": 3, "unresolved": 6}
        assert stub.stats.requests == 1  # the same retrieval scored again: its verdicts were cached
        assert value(metrics, "ctxprec_resolver_unresolved_total", source="kb-postgres", reason="missing") == 4
        assert value(metrics, "ctxprec_resolver_unresolved_total", source="kb-postgres", reason="error") == 2
        assert value(metrics, "ctxprec_samples_total", service="resolver-faults", decision="unresolved") == 6
        assert len(capture.spans) == 27  # 3 runs x 3 questions x (request, retrieval, chat): nothing lost
        unresolved = [o for o in outcomes.items if o.decision is Decision.UNRESOLVED]
        assert all(not o.retrieval.contexts and not o.retrieval.documents_resolved for o in unresolved)
    finally:
        if not (stores.postgres.data / "postmaster.pid").exists():
            stores.postgres.start()
        await _superuser(stores, "INSERT INTO documents VALUES ($1, $2) ON CONFLICT DO NOTHING",
                         *next((i, t) for i, t, _ in CORPUS if i == "kb-04"))
        await capture.stop()


async def _superuser(stores: Stores, sql: str, *args: Any) -> Any:
    connection = await asyncpg.connect(host=stores.postgres.socket_dir, port=stores.postgres.port,
                                       user=stores.postgres.superuser, database="postgres")
    try:
        return await connection.fetchval(sql, *args)
    finally:
        await connection.close()


async def test_a_source_that_does_not_answer_in_time_is_unresolved_timeout(
        stores: Stores, make_stub_judge: MakeStub, tmp_path: Path) -> None:
    stub = await make_stub_judge()
    slow = stores.source("postgres", timeout_s=0.3,
                         query="SELECT id, content FROM documents, pg_sleep(2) WHERE id = ANY($1)")
    outcomes = Outcomes()
    async with running(resolver_config(tmp_path, [slow], *judge_flags(stub))) as pipeline:
        pipeline.add_sink(outcomes)
        await traffic([pipeline], "resolver-slow")
        metrics = scrape(await metrics_text(pipeline))
    assert set(_decided(outcomes).values()) == {("unresolved", "timeout")}
    assert value(metrics, "ctxprec_resolver_unresolved_total", source="kb-postgres", reason="timeout") == 3
    assert value(metrics, "ctxprec_resolver_lookups_total", source="kb-postgres", outcome="timeout") >= 1
    assert stub.stats.requests == 0


async def test_an_id_holding_sql_is_only_an_id_nobody_has(stores: Stores) -> None:
    """Ids are bound as the query's parameter: one written as SQL is a missing id, the table stays."""
    queue, decisions = Queue(), Decisions()
    config = ResolverConfig.model_validate({"sources": [stores.source("postgres")]})
    resolver = DocumentResolver(config, downstream=queue, decisions=decisions)
    await resolver.start()
    try:
        hostile = "kb-07'); DROP TABLE documents; --"
        assert resolver.try_submit(ids_only(["kb-01", hostile], span=1))
        assert resolver.try_submit(ids_only(["kb-07", "kb-01"], span=3))
        await wait_until(lambda: len(queue.items) + len(decisions.items) == 2, what="both decided")
    finally:
        await resolver.close()
    [unresolved] = decisions.items
    assert (unresolved.decision, unresolved.error[0]) == (Decision.UNRESOLVED, "missing")
    [resolved] = queue.items
    assert [c.id for c in resolved.contexts] == ["kb-07", "kb-01"]
    assert await _superuser(stores, "SELECT count(*) FROM documents") == len(CORPUS)


@pytest.mark.parametrize(("kind", "overrides", "said"), [
    ("postgres", {"query": "SELECT id, content, 1 FROM documents WHERE id = ANY($1)"}, "two columns"),
    ("postgres", {"dsn": "postgresql://reader@127.0.0.1:9/postgres"}, "kb-postgres (postgres)"),
    ("postgres", {"query": "SELECT id, content FROM documents WHERE id = $1"}, "the array of ids"),
    ("chroma", {"collection": "no-such-collection"}, "does not exist"),
    ("milvus", {"text_field": "body"}, "has no field 'body'"),
    ("redis", {"url": "redis://127.0.0.1:9/0"}, "kb-redis (redis)"),
])
async def test_a_source_that_cannot_answer_stops_the_start_naming_it_never_its_address(
        kind: str, overrides: dict[str, Any], said: str, stores: Stores, tmp_path: Path) -> None:
    source = stores.source(kind, **overrides)
    with pytest.raises(ResolverStartError) as error:
        async with running(resolver_config(tmp_path, [source])):
            pass
    message = str(error.value)
    assert f"resolver source kb-{kind}" in message and said in message
    for secret in (source.get("dsn"), source.get("url"), source.get("uri"), READER_PASSWORD, "reader@"):
        assert not secret or secret not in message


async def test_with_resolver_required_off_an_unreachable_source_warns_and_its_retrievals_are_unresolved(
        stores: Stores, make_stub_judge: MakeStub, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stub = await make_stub_judge()
    down = stores.source("postgres", dsn="postgresql://reader@127.0.0.1:9/postgres", timeout_s=0.5)
    outcomes = Outcomes()
    with caplog.at_level(logging.WARNING, logger="ctxprec.resolver"):
        async with running(resolver_config(tmp_path, [down], *judge_flags(stub), "--resolver-required", "off")) as p:
            p.add_sink(outcomes)
            await traffic([p], "resolver-down")
    assert set(_decided(outcomes).values()) == {("unresolved", "error")}
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("resolver source kb-postgres (postgres)" in w and "--resolver-required off" in w for w in warnings)
    assert not any("127.0.0.1:9" in w or READER_PASSWORD in w for w in warnings)
