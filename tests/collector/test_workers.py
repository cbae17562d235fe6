"""The worker pool over a real engine and the stub judge over real HTTP."""
from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable

from ctxprec.collector.components import shutdown
from ctxprec.collector.exporters.fanout import ResultFanout
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision, Outcome, Retrieval, RetrievedContext
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.collector.scoring.workers import ScoringWorkers
from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.documents import text_hash
from ctxprec.scorer.engine import build_engine
from tests.helpers.rag_traces import DecisionLog

MakeStub = Callable[..., Awaitable[StubJudge]]


class CollectSink:
    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def emit(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


class BrokenSink:
    def emit(self, outcome: Outcome) -> None:
        raise RuntimeError("this sink is broken")


def retrieval(i: int, contexts: list[str]) -> Retrieval:
    return Retrieval(trace_id=f"{i:032x}", span_id=f"{i:016x}", service="svc", query="how to reset a password",
                     contexts=[RetrievedContext(c) for c in contexts], retriever="kb", output="answer text",
                     sample_rate=0.5)


def make_workers(stub: StubJudge, sinks: list[Any], log: list[tuple[str, Decision, Any]], *, threshold: float = 0.5,
                 queue_size: int = 100, workers: int = 4, **judge: Any) -> tuple[ScoringWorkers, Metrics]:
    """The pool hands outcomes to `sinks`, then to a log of (span id, decision, attributes the
    span write-back would write)."""
    metrics = Metrics()
    engine = build_engine(JudgeConfig(model="openai/stub", api_base=stub.url, api_key="x", **judge))
    identity = ScorerIdentity.of_engine(engine)
    fanout = ResultFanout(metrics, [*sinks, DecisionLog(log, identity, threshold)])
    pool = ScoringWorkers(engine, downstream=fanout, identity=identity, queue_size=queue_size, workers=workers,
                          metrics=metrics)
    return pool, metrics


async def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_scores_follow_the_judge_and_fan_out_before_the_decision(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge()
    sink = CollectSink()
    log: list[tuple[str, Decision, Any]] = []
    pool, metrics = make_workers(stub, [BrokenSink(), sink], log, threshold=0.9)
    await pool.start()
    # MAP of yes/no/yes = (1/1 + 2/3) / 2 = 0.83; of no/yes = (1/2)/1 = 0.5.
    assert pool.try_submit(retrieval(1, ["[relevant] a", "[irrelevant] b", "[relevant] c"]))
    assert pool.try_submit(retrieval(2, ["[irrelevant] a", "[relevant] b"]))
    await wait_for(lambda: len(log) == 2)
    by_span = {o.retrieval.span_id: o for o in sink.outcomes}
    first, second = by_span[f"{1:016x}"], by_span[f"{2:016x}"]
    assert first.decision is Decision.EVALUATED and first.result is not None and first.result.score == 0.83
    assert second.result is not None and second.result.score == 0.5
    assert first.record["score"] == 0.83 and first.record["sample_rate"] == 0.5 and first.record["error"] is None
    assert first.record["retriever"] == "kb" and first.record["decision"] == "evaluated"
    assert [v["document"] for v in first.record["verdicts"]] == [
        text_hash(c) for c in ("[relevant] a", "[irrelevant] b", "[relevant] c")]
    attrs = {span: a for span, _, a in log}[f"{1:016x}"]
    assert attrs["gen_ai.evaluation.score.value"] == 0.83
    assert attrs["gen_ai.evaluation.score.label"] == "low"  # 0.83 < threshold 0.9
    assert attrs["evaluations.0.evaluation.annotator_kind"] == "LLM"
    assert attrs["evaluations.0.evaluation.identifier"] == pool.engine.fingerprint
    verdicts = json.loads(attrs["ctxprec.verdicts"])
    assert [(v["index"], v["relevant"]) for v in verdicts] == [(0, True), (1, False), (2, True)]
    assert attrs["ctxprec.first_relevant_rank"] == 1 and attrs["ctxprec.k"] == 3 and attrs["ctxprec.sample_rate"] == 0.5
    assert metrics.registry.get_sample_value("ctxprec_samples_total", {"service": "svc", "decision": "evaluated"}) == 2
    await shutdown(pool, 5)
    await pool.engine.aclose()


async def test_judge_failure_is_a_failed_decision_with_no_score(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("server_error",))
    sink = CollectSink()
    log: list[tuple[str, Decision, Any]] = []
    pool, metrics = make_workers(stub, [sink], log, max_retries=0)
    await pool.start()
    pool.try_submit(retrieval(1, ["[relevant] a"]))
    await wait_for(lambda: len(log) == 1)
    (outcome,) = sink.outcomes
    assert outcome.decision is Decision.FAILED and outcome.result is None and outcome.error is not None
    assert outcome.record["score"] is None and outcome.record["error"]["type"] == outcome.error[0]
    attrs = log[0][2]
    assert attrs["error.type"] == outcome.error[0]
    assert not any(k.startswith("gen_ai.evaluation.score") or k == "evaluations.0.evaluation.score" for k in attrs)
    assert metrics.registry.get_sample_value("ctxprec_samples_total", {"service": "svc", "decision": "failed"}) == 1
    await shutdown(pool, 5)
    await pool.engine.aclose()


async def test_full_queue_refuses_without_waiting(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge(latency_ms=300)
    log: list[tuple[str, Decision, Any]] = []
    pool, _ = make_workers(stub, [], log, queue_size=2, workers=1)
    await pool.start()
    accepted = [pool.try_submit(retrieval(i, ["[relevant] a"])) for i in range(6)]
    # One may already be with the worker; never more than queue_size + workers accepted.
    assert 2 <= sum(accepted) <= 3 and not accepted[-1]
    await wait_for(lambda: len(log) == sum(accepted))
    assert all(d is Decision.EVALUATED for _, d, _ in log)
    await shutdown(pool, 5)
    await pool.engine.aclose()


async def test_shutdown_decides_everything_unfinished_as_failed_shutdown(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge(latency_ms=3000)
    sink = CollectSink()
    log: list[tuple[str, Decision, Any]] = []
    pool, _ = make_workers(stub, [sink], log, queue_size=20, workers=2)
    await pool.start()
    for i in range(8):
        assert pool.try_submit(retrieval(i, ["[relevant] a"]))
    await asyncio.sleep(0.2)
    started = asyncio.get_running_loop().time()
    await shutdown(pool, 0.3)
    assert asyncio.get_running_loop().time() - started < 2.5  # did not wait for the slow judge
    assert sorted(s for s, _, _ in log) == sorted(f"{i:016x}" for i in range(8))
    assert all(d is Decision.FAILED and a["error.type"] == "shutdown" for _, d, a in log)
    assert all(o.record["error"]["type"] == "shutdown" for o in sink.outcomes) and len(sink.outcomes) == 8
    assert not pool.try_submit(retrieval(99, ["x"]))
    await pool.engine.aclose()


async def test_shutdown_drains_work_that_finishes_within_the_deadline(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge(latency_ms=50)
    log: list[tuple[str, Decision, Any]] = []
    pool, _ = make_workers(stub, [], log, queue_size=20, workers=2)
    await pool.start()
    for i in range(6):
        pool.try_submit(retrieval(i, [f"[relevant] doc {i}"]))
    await shutdown(pool, 10)
    assert len(log) == 6 and all(d is Decision.EVALUATED for _, d, _ in log)
    await pool.engine.aclose()


async def test_records_carry_when_the_retrieval_happened(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge()
    sink = CollectSink()
    log: list[tuple[str, Decision, Any]] = []
    pool, _ = make_workers(stub, [sink], log)
    await pool.start()
    when = retrieval(1, ["[relevant] a"])
    when.end_time_unix_nano = 1_764_417_600_250_000_000  # 2025-11-29T12:00:00.250Z
    unknown = retrieval(2, ["[relevant] a"])
    pool.try_submit(when)
    pool.try_submit(unknown)
    await wait_for(lambda: len(sink.outcomes) == 2)
    await shutdown(pool, 5)
    await pool.engine.aclose()
    by_span = {o.retrieval.span_id: o.record for o in sink.outcomes}
    assert by_span[f"{1:016x}"]["timestamp"] == "2025-11-29T12:00:00.250Z"
    assert by_span[f"{2:016x}"]["timestamp"] is None


async def test_one_trace_with_many_retrievals_takes_turns_with_the_others(make_stub_judge: MakeStub) -> None:
    # An agent trace hands 30 retrievals over at once; two other traces' retrievals come after
    # them. The queue takes turns between traces: those two are scored second and third, not 31st.
    stub = await make_stub_judge()
    sink = CollectSink()
    log: list[tuple[str, Decision, Any]] = []
    pool, _ = make_workers(stub, [sink], log, workers=1)
    agent = [retrieval(1, [f"[relevant] step {n}"]) for n in range(30)]
    for n, r in enumerate(agent):
        r.span_id = f"{100 + n:016x}"
        assert pool.try_submit(r)
    others = [retrieval(2, ["[relevant] a"]), retrieval(3, ["[relevant] b"])]
    for r in others:
        assert pool.try_submit(r)
    assert pool.depth == 32
    await pool.start()
    await wait_for(lambda: len(sink.outcomes) == 32)
    order = [o.retrieval.trace_id for o in sink.outcomes]
    assert order[:3] == [agent[0].trace_id, others[0].trace_id, others[1].trace_id]
    assert [o.retrieval.span_id for o in sink.outcomes if o.retrieval.trace_id == agent[0].trace_id] == [
        r.span_id for r in agent]  # a trace's own retrievals in the order they came
    await shutdown(pool, 5)
