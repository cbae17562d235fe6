"""The scoring engine in a child process (ProcessEngine) against the in-process engine it stands
in for: same identity, same results, same errors, judge events over the pipe, and a child that
never outlives its parent. The judge is the stub judge over real HTTP; the child is a real
`python -m ctxprec.collector.scoring.engine_child` process."""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import psutil
import pytest
from ctxprec.collector import config as config_module
from ctxprec.collector.components import shutdown
from ctxprec.collector.config import ConfigError
from ctxprec.collector.exporters.fanout import ResultFanout
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.model import Decision, Retrieval, RetrievedContext
from ctxprec.collector.pipeline import placement_of
from ctxprec.collector.scoring.engine_process import EXITED, UNAVAILABLE, ProcessEngine
from ctxprec.collector.scoring.identity import ScorerIdentity
from ctxprec.collector.scoring.placement import (
    make_engine,
    usable_cpus,
    use_scoring_process,
)
from ctxprec.collector.scoring.workers import ScoringWorkers
from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import ContextPrecisionEngine, build_engine, engine_identity
from ctxprec.scorer.judge.chat import JudgeError, RequestEvent
from ctxprec.scorer.result import ScoreResult

from tests.helpers.rag_traces import DecisionLog

pytestmark = pytest.mark.slow

MakeStub = Callable[..., Awaitable[StubJudge]]
ROOT = Path(__file__).resolve().parents[2]

# (query, contexts, output, expected_output). The stub's markers pin each verdict; the last
# sample has no markers, so the stub's shared-content-word rule decides it.
SAMPLES: list[tuple[str, list[str], str | None, str | None]] = [
    ("how to reset a password", ["[relevant] a", "[irrelevant] b", "[relevant] c"], "answer text", None),
    ("refund window", ["[irrelevant] shipping", "[relevant] refunds within 30 days"], None, "30 days"),
    ("opening hours", ["[irrelevant] our history"], None, None),
    ("api limits", ["[relevant] one", "[relevant] two", "[irrelevant] three", "[relevant] four"], "out", None),
    ("billing refund policy", ["the refund policy is generous", "weather today is sunny"], None, None),
]


def stub_config(stub: StubJudge, **judge: Any) -> JudgeConfig:
    return JudgeConfig(model="openai/stub", api_base=stub.url, api_key="x", **judge)


def outcome(result: ScoreResult) -> tuple[Any, ...]:
    """Everything of a result that must not depend on where the engine ran (latency does)."""
    usage = result.usage
    return (result.score, [(v.index, v.relevant, v.reason, v.cached) for v in result.verdicts], result.reason,
            result.k, result.precision_at_k, result.hit, result.first_relevant_rank, result.relevant_count,
            result.scale, result.reference_kind, result.truncated_contexts,
            (usage.calls, usage.prompt_tokens, usage.completion_tokens, usage.cached_contexts))


async def score_all(engine: Any) -> list[tuple[Any, ...]]:
    results = []
    for query, contexts, output, expected in SAMPLES:
        results.append(outcome(await engine.score(query, contexts, output=output, expected_output=expected)))
    return results


def event_key(event: RequestEvent) -> tuple[Any, ...]:
    return (event.model, event.outcome, event.prompt_tokens, event.completion_tokens, event.cost_usd)


def without_address(exc: BaseException, stub: StubJudge) -> str:
    return str(exc).replace(f"{stub.host}:{stub.port}", "STUB")


def alive(pid: int) -> bool:
    """A zombie has exited: whether its new parent reaps it is not the scoring process's doing."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


# --- 1. identity -------------------------------------------------------------------------------


@pytest.mark.parametrize(("judge", "scale"), [
    ({"model": "local"}, 1),
    ({"model": "openai/stub", "api_base": "http://127.0.0.1:9/v1", "api_key": "x"}, 1),
    ({"model": "openai/stub", "api_base": "http://127.0.0.1:9/v1", "api_key": "x", "reason_mode": "llm"}, 1),
    ({"model": "openai/stub", "api_base": "http://127.0.0.1:9/v1", "api_key": "x", "redact_pii": True}, 1),
    ({"model": "local", "redact_pii": True}, 1),
    ({"model": "local"}, 10),
    ({"model": "openai/stub", "api_base": "http://127.0.0.1:9/v1", "api_key": "x"}, 10),
], ids=["local", "openai-stub", "reason-llm", "redact-pii", "local-redact-pii", "local-scale-10", "stub-scale-10"])
async def test_identity_known_without_building_matches_the_built_engine(judge: dict[str, Any], scale: float) -> None:
    def identity_of(x: Any) -> tuple[Any, ...]:
        return (x.model, x.prompt_version, x.annotator_kind, x.fingerprint, x.scale)

    config = JudgeConfig(**judge)
    built = build_engine(config, scale=scale)
    try:
        want = identity_of(built)
        assert identity_of(engine_identity(config, scale=scale)) == want
        # The parent side says the same before any child exists (the exporters read it at start-up).
        proc = ProcessEngine(config, scale=scale)
        assert identity_of(proc) == want
        assert proc.pid is None
    finally:
        await built.aclose()


# --- 2. results ---------------------------------------------------------------------------------


async def _in_process_and_in_child(config: JudgeConfig, scale: float) -> tuple[Any, Any]:
    """`score_all` through the in-process engine and through a ProcessEngine."""
    local = build_engine(config, scale=scale)
    remote = ProcessEngine(config, scale=scale)
    try:
        return await score_all(local), await score_all(remote)
    finally:
        await local.aclose()
        await remote.aclose()


@pytest.mark.parametrize(("judge", "scale"), [
    ({}, 1),
    ({"reason_mode": "llm"}, 10),
], ids=["template-reason", "llm-reason-scale-10"])
async def test_child_scores_equal_in_process_scores_over_the_stub(make_stub_judge: MakeStub, judge: dict[str, Any],
                                                                 scale: float) -> None:
    stub = await make_stub_judge()
    want, got = await _in_process_and_in_child(stub_config(stub, **judge), scale)
    # The markers pinned these scores (MAP, two decimals), so an equal-but-wrong pair is still caught.
    pinned = {1: [0.83, 0.5, 0.0, 0.92, 1.0], 10: [8.33, 5.0, 0.0, 9.17, 10.0]}[scale]
    assert [w[0] for w in want] == pinned
    assert got == want


async def test_child_scores_equal_in_process_scores_with_the_local_judge() -> None:
    want, got = await _in_process_and_in_child(JudgeConfig(model="local"), 1)
    assert got == want
    assert any(w[0] > 0 for w in want) and any(w[0] == 0 for w in want)  # not all the same answer


# --- 3. judge request events ----------------------------------------------------------------------


async def test_every_judge_request_reaches_the_parents_observer(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge()
    # llm reasons: two requests per score (verdicts, then reason); no cache, so none are skipped.
    config = stub_config(stub, reason_mode="llm", cache_size=0)
    local_events: list[RequestEvent] = []
    local = build_engine(config, observer=local_events.append)
    try:
        await score_all(local)
    finally:
        await local.aclose()
    assert stub.stats.requests == 2 * len(SAMPLES)
    stub.reset_stats()

    events: list[RequestEvent] = []
    remote = ProcessEngine(config, observer=events.append)
    try:
        await score_all(remote)
        # Events travel in their own frames and may land just after the last result, but they
        # arrive while the child runs (not only in the flush on close).
        await wait_for(lambda: len(events) >= stub.stats.requests, timeout=5, what="the judge events")
    finally:
        await remote.aclose()  # the parent reads the pipe to its end: any stray extra event is in by now
    assert len(events) == stub.stats.requests == 2 * len(SAMPLES)
    assert all(e.outcome == "ok" for e in events)
    assert [event_key(e) for e in events] == [event_key(e) for e in local_events]


async def test_local_judge_events_cross_the_pipe_like_remote_ones() -> None:
    # The local judge reports one event per judged sample; from the scoring process too.
    local_events: list[RequestEvent] = []
    local = build_engine(JudgeConfig(model="local"), observer=local_events.append)
    try:
        await score_all(local)
    finally:
        await local.aclose()
    events: list[RequestEvent] = []
    remote = ProcessEngine(JudgeConfig(model="local"), observer=events.append)
    try:
        await score_all(remote)
        await wait_for(lambda: len(events) >= len(local_events), timeout=5, what="the local judge's events")
    finally:
        await remote.aclose()
    judged = sum(1 for _, contexts, _, _ in SAMPLES if contexts)
    assert len(local_events) == len(events) == judged > 0
    assert {(e.model, e.outcome) for e in events} == {("local", "ok")}
    assert all(e.latency_s >= 0 and e.prompt_tokens == e.completion_tokens == 0 and e.cost_usd == 0 for e in events)


async def test_local_judge_fallbacks_from_the_scoring_process_reach_the_fallback_counter() -> None:
    from ctxprec.collector.metrics.judge import JudgeMetricsObserver
    from ctxprec.collector.metrics.registry import Metrics

    metrics = Metrics()
    events: list[RequestEvent] = []
    observer = JudgeMetricsObserver(metrics)
    remote = ProcessEngine(JudgeConfig(model="local"), observer=lambda e: (events.append(e), observer(e)))
    try:
        await remote.score("When was the town hall built?",
                           ["Das Rathaus mit seinem Uhrturm wurde 1902 fertiggestellt.", "The town hall was finished in 1902."],
                           output="The town hall was finished in 1902.")
        await remote.score("Hur lång är Eiffeltornet?", ["Med antennerna på toppen når tornet 330 meter."],
                           output="Eiffeltornet är 330 meter högt med antennerna.")
        await wait_for(lambda: len(events) >= 2, timeout=5, what="the local judge's events")
    finally:
        await remote.aclose()
    assert sorted(e.local_fallbacks for e in events) == [("language_mismatch",), ("unsupported_language",)]
    counted = {s.labels["reason"]: s.value for m in metrics.registry.collect() for s in m.samples
               if s.name == "ctxprec_local_judge_fallback_total"}
    assert counted == {"language_mismatch": 1.0, "unsupported_language": 1.0}


# --- 4. bad input ----------------------------------------------------------------------------------

BAD_INPUTS: list[tuple[Any, Any]] = [
    (123, ["a context"]),  # a query that is not a string
    ("a query", []),  # no contexts
    ("a query", ["fine", 5, "fine"]),  # a context that is not a string
    ("a query", None),
    ("a query", "one string, not a list"),
]


async def test_bad_input_raises_the_same_value_error_and_never_reaches_the_child() -> None:
    config = JudgeConfig(model="local")
    local = build_engine(config)
    remote = ProcessEngine(config)
    try:
        want = []
        for query, contexts in BAD_INPUTS:
            with pytest.raises(ValueError) as info:
                await local.score(query, contexts)
            want.append(str(info.value))
        # Before any child exists: rejecting the input must not even start one.
        for (query, contexts), message in zip(BAD_INPUTS, want):
            with pytest.raises(ValueError) as info:
                await remote.score(query, contexts)
            assert str(info.value) == message
        assert remote.pid is None

        await remote.warm_up()
        pid = remote.pid
        assert pid is not None
        for (query, contexts), message in zip(BAD_INPUTS, want):
            with pytest.raises(ValueError) as info:
                await remote.score(query, contexts)
            assert str(info.value) == message
        # The same child still serves, and serves correctly.
        result = await remote.score(*SAMPLES[0][:2])
        assert remote.pid == pid and remote.restarts == 0
        assert outcome(result) == outcome(await local.score(*SAMPLES[0][:2]))
    finally:
        await local.aclose()
        await remote.aclose()


# --- 5. judge errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["server_error", "rate_limit", "malformed", "wrong_count", "timeout"])
async def test_judge_error_keeps_its_kind_across_the_pipe(make_stub_judge: MakeStub, fault: str) -> None:
    # One stub each, same seed: wrong_count draws which verdict to drop, and both must see the same draws.
    stubs = [await make_stub_judge(error_rate=1.0, fault_kinds=(fault,), hang_s=2.0, retry_after_s=0.05, seed=7)
             for _ in range(2)]
    local_config, config = (stub_config(s, max_retries=0, timeout_s=0.3, cache_size=0) for s in stubs)
    query, contexts, output, expected = SAMPLES[0]
    local_events: list[RequestEvent] = []
    local = build_engine(local_config, observer=local_events.append)
    try:
        with pytest.raises(JudgeError) as want:
            await local.score(query, contexts, output=output, expected_output=expected)
    finally:
        await local.aclose()

    events: list[RequestEvent] = []
    remote = ProcessEngine(config, observer=events.append)
    try:
        with pytest.raises(JudgeError) as got:
            await remote.score(query, contexts, output=output, expected_output=expected)
        await wait_for(lambda: len(events) >= len(local_events), timeout=5, what="the failed request's event")
    finally:
        await remote.aclose()
    assert want.value.kind not in ("judge_error", EXITED, UNAVAILABLE)  # a specific kind, not a catch-all
    assert got.value.kind == want.value.kind
    # The same message, up to the address of the stub each engine was pointed at.
    assert without_address(got.value, stubs[1]) == without_address(want.value, stubs[0])
    # Every attempt is counted by outcome in the parent, as it would be in process (a malformed
    # answer is an "ok" HTTP exchange followed by re-asks, a 500 a "server_error", ...).
    assert local_events and [e.outcome for e in events] == [e.outcome for e in local_events]
    assert stubs[1].stats.requests == stubs[0].stats.requests == len(events)


# --- 6. the child dies -------------------------------------------------------------------------------


async def test_killed_child_fails_its_scores_and_the_next_score_starts_a_new_one(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge(latency_ms=2000)
    # All three at the judge at once: not one at a time, as the adaptive limit starts.
    config = stub_config(stub, cache_size=0, adaptive_concurrency=False)
    engine = ProcessEngine(config)
    try:
        await engine.warm_up()
        first_pid = engine.pid
        assert first_pid is not None
        tasks = [asyncio.create_task(engine.score(f"question {i}", [f"[relevant] doc {i}"])) for i in range(3)]
        # All three are with the judge, i.e. held by the child, when it is killed.
        await wait_for(lambda: stub.stats.requests >= 3, timeout=5, what="the scores to reach the judge")
        os.kill(first_pid, signal.SIGKILL)
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        assert all(isinstance(o, JudgeError) and o.kind == EXITED for o in outcomes), outcomes

        stub.configure(latency_ms=0)
        result = await engine.score("question again", ["[irrelevant] x", "[relevant] y"])
        assert result.score == 0.5
        assert engine.pid is not None and engine.pid != first_pid and engine.restarts == 1
        assert not alive(first_pid)
    finally:
        await engine.aclose()


# --- 7. shutdown ----------------------------------------------------------------------------------------


async def test_aclose_ends_the_child_and_later_scores_fail_with_shutdown() -> None:
    engine = ProcessEngine(JudgeConfig(model="local"))
    await engine.warm_up()
    pid = engine.pid
    assert pid is not None and alive(pid)
    assert engine._child is not None
    child = engine._child.proc  # the parent's handle: only it knows how the child ended
    await engine.aclose()
    await wait_for(lambda: not alive(pid), timeout=5, what=f"scoring process {pid} to end")
    # It finished on the "close" message (exit 0), not by the kill fallback after a timeout.
    assert child is not None and child.returncode == 0
    assert engine.pid is None
    with pytest.raises(JudgeError) as info:
        await engine.score(*SAMPLES[0][:2])
    assert info.value.kind == "shutdown"
    with pytest.raises(JudgeError) as info:
        await engine.warm_up()
    assert info.value.kind == "shutdown"


# --- 8. the parent dies ------------------------------------------------------------------------------------


async def test_child_does_not_outlive_a_parent_killed_with_sigkill() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.collector.engine_process_app", cwd=str(ROOT), env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE)
    child_pid: int | None = None
    try:
        assert parent.stdout is not None
        line = (await asyncio.wait_for(parent.stdout.readline(), 30)).decode()
        assert line.startswith("child "), f"the helper printed {line!r}"
        child_pid = int(line.split()[1])
        assert alive(child_pid) and psutil.Process(child_pid).ppid() == parent.pid
        os.kill(parent.pid, signal.SIGKILL)
        await parent.wait()
        await wait_for(lambda: not alive(child_pid), timeout=10, what=f"orphaned scoring process {child_pid} to end")
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()
        if child_pid is not None and alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)  # do not leak it when the assertion above failed


# --- 9. the child cannot build the judge ----------------------------------------------------------------------


async def test_a_judge_the_child_cannot_build_fails_warm_up_naming_the_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    # hosted_vllm has no default base URL: without api_base and its env variables make_chat_client refuses it.
    for name in ("HOSTED_VLLM_API_BASE", "HOSTED_VLLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    config = JudgeConfig(model="hosted_vllm/judge", transport="direct")
    with pytest.raises(ValueError) as want:
        build_engine(config)
    assert "api_base" in str(want.value)
    engine = ProcessEngine(config)
    try:
        with pytest.raises(JudgeError) as got:
            await engine.warm_up()
        assert got.value.kind == UNAVAILABLE
        assert f"ValueError: {want.value}" in str(got.value)
        assert engine.pid is None and engine.rss_bytes() == 0
        # A score meets the same refusal (after the restart pause), not a hang or another error.
        with pytest.raises(JudgeError) as again:
            await engine.score(*SAMPLES[0][:2])
        assert again.value.kind == UNAVAILABLE and "api_base" in str(again.value)
    finally:
        await engine.aclose()


# --- 10. placement ------------------------------------------------------------------------------------------


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    config_module.add_arguments(parser)
    return parser.parse_args(list(flags))


KAFKA_FLAGS = ("--kafka-bootstrap", "127.0.0.1:9092", "--kafka-topic", "rag_events")


@pytest.mark.parametrize("cpus", [1.0, 2.0])
@pytest.mark.parametrize("kafka", [False, True])
@pytest.mark.parametrize("mode", ["auto", "on", "off"])
def test_scoring_process_placement(mode: str, kafka: bool, cpus: float) -> None:
    config = config_module.load(parse("--scoring-process", mode, *(KAFKA_FLAGS if kafka else ())), environ={})
    assert config.scoring.process == mode and config.kafka.enabled == kafka
    # auto: only a Kafka reader with a second core to give away; on/off are not second-guessed.
    expected = {"on": True, "off": False, "auto": kafka and cpus >= 2}[mode]
    assert use_scoring_process(placement_of(config), cpus=cpus) is expected


def test_scoring_process_defaults_to_auto_and_cpus_are_counted() -> None:
    assert config_module.load(parse(), environ={}).scoring.process == "auto"
    assert 0 < usable_cpus() <= (os.cpu_count() or 1)


def test_bogus_scoring_process_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        config_module.load(parse("--scoring-process", "bogus"), environ={})
    assert "config key scoring.process (from --scoring-process): must be one of auto, on, off" in str(info.value)


async def test_make_engine_follows_the_placement() -> None:
    events: list[RequestEvent] = []
    on = make_engine(placement_of(config_module.load(parse("--scoring-process", "on"), environ={})), events.append)
    off = make_engine(placement_of(config_module.load(parse("--scoring-process", "off"), environ={})), events.append)
    try:
        assert isinstance(on, ProcessEngine) and on.observer is not None and on.pid is None  # started lazily
        assert isinstance(off, ContextPrecisionEngine)
    finally:
        await on.aclose()
        await off.aclose()


# --- 11. memory -------------------------------------------------------------------------------------------------


async def test_rss_is_the_childs_while_it_runs_and_zero_after_close() -> None:
    engine = ProcessEngine(JudgeConfig(model="local"))
    assert engine.rss_bytes() == 0  # no child yet
    await engine.warm_up()
    try:
        pid = engine.pid
        assert pid is not None
        rss = engine.rss_bytes()
        # The child's own memory (not this test process's, which is several times larger).
        child_rss = psutil.Process(pid).memory_info().rss
        assert rss > 0 and abs(rss - child_rss) < child_rss // 2
    finally:
        await engine.aclose()
    assert engine.rss_bytes() == 0


# --- 12. the worker pool ------------------------------------------------------------------------------------------


async def test_workers_over_a_process_engine_evaluate_every_retrieval(make_stub_judge: MakeStub) -> None:
    stub = await make_stub_judge(latency_ms=20)
    config = stub_config(stub)
    local = build_engine(config)
    try:
        want = [(await local.score(q, c, output=o, expected_output=e)).score for q, c, o, e in SAMPLES]
    finally:
        await local.aclose()

    engine = ProcessEngine(config)
    metrics = Metrics()
    log: list[tuple[str, Decision, Any]] = []
    identity = ScorerIdentity.of_engine(engine)
    pool = ScoringWorkers(engine, downstream=ResultFanout(metrics, [DecisionLog(log, identity)]), identity=identity,
                          queue_size=50, workers=4, metrics=metrics)
    await engine.warm_up()
    await pool.start()
    try:
        for i, (query, contexts, output, expected) in enumerate(SAMPLES):
            span_id = f"{i + 1:016x}"
            r = Retrieval(trace_id=f"{i + 1:032x}", span_id=span_id, service="svc", query=query,
                          contexts=[RetrievedContext(c) for c in contexts], retriever="kb", output=output,
                          expected_output=expected)
            assert pool.try_submit(r)
        await wait_for(lambda: len(log) == len(SAMPLES), timeout=20, what="every retrieval decided")
    finally:
        await shutdown(pool, 5)
        await engine.aclose()
    decided = {span_id: (decision, attrs) for span_id, decision, attrs in log}
    for i, score in enumerate(want):
        decision, attrs = decided[f"{i + 1:016x}"]
        assert decision is Decision.EVALUATED and attrs is not None
        assert attrs["gen_ai.evaluation.score.value"] == score
        assert attrs["evaluations.0.evaluation.identifier"] == engine.fingerprint
