"""Structured outputs, honest concurrency and re-asks against the stub judge's models of real
servers (collector/stub_judge.py): a form the server rejects, shapes and 1-based indices small
models write without a schema, answers cut at max_tokens, a server that answers one at a time."""
from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.batch import JudgeTally, score_events
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import build_engine
from ctxprec.scorer.event_files import jsonl_events
from ctxprec.scorer.judge.chat import ChatMessage, JudgeBadResponse, JudgeError
from ctxprec.scorer.judge.limits import AdaptiveLimit
from ctxprec.scorer.judge.structured import FORMS, response_format, verdict_schema

CONTEXTS = ["Refunds are accepted within 30 days of delivery.", "The Eiffel Tower is 330 metres tall.",
            "Open the order and choose Return item to get a refund."]
QUERY, ANSWER = "How do refunds work?", "Refunds are accepted within 30 days: open the order and choose Return item."


def engine_for(stub: StubJudge, observer: Any = None, **options: Any):
    config = JudgeConfig(model="openai/stub", api_base=stub.url, api_key="t", cache_size=0, **options)
    return build_engine(config, observer=observer)


async def score(stub: StubJudge, observer: Any = None, **options: Any):
    engine = engine_for(stub, observer, **options)
    try:
        return await engine.score(QUERY, CONTEXTS, output=ANSWER)
    finally:
        await engine.aclose()


def test_each_form_carries_the_schema_its_way() -> None:
    schema = verdict_schema([2, 5])
    entries = schema["properties"]["verdicts"]["prefixItems"]
    assert [e["properties"]["context_index"]["const"] for e in entries] == [2, 5]
    assert schema["properties"]["verdicts"]["minItems"] == schema["properties"]["verdicts"]["maxItems"] == 2
    assert entries[0]["properties"]["verdict"]["enum"] == ["yes", "no"]
    assert entries[0]["properties"]["reason"]["maxLength"] > 0
    assert response_format("json_schema", schema) == {
        "type": "json_schema", "json_schema": {"name": "judge_answer", "strict": True, "schema": schema}}
    assert response_format("json_object_schema", schema) == {"type": "json_object", "schema": schema}
    assert response_format("json_object", schema) == {"type": "json_object"}
    assert response_format("off", schema) is None


async def test_the_best_form_is_sent_and_settles_without_a_probe(stub_judge: StubJudge) -> None:
    result = await score(stub_judge)
    assert [v.relevant for v in result.verdicts] == [True, False, True]
    assert stub_judge.stats.requests == 1 and stub_judge.stats.forms == {"json_schema": 1}


@pytest.mark.parametrize("status", [400, 422, 500])
async def test_a_rejected_form_steps_down_once_and_no_sample_fails(make_stub_judge, status: int, caplog) -> None:
    stub = await make_stub_judge(reject_forms=("json_schema",), reject_status=status)
    engine = engine_for(stub)
    results = await asyncio.gather(*(engine.score(f"{QUERY} {i}", CONTEXTS, output=ANSWER) for i in range(5)))
    await engine.aclose()
    assert all(len(r.verdicts) == 3 for r in results)
    # One call in json_schema rejected, a probe confirming it, a probe in the next form taken;
    # then every call goes in json_object_schema.
    assert stub.stats.forms == {"json_schema": 2, "json_object_schema": 1 + 5}
    assert stub.stats.responses == {status: 2, 200: 6}
    assert engine.judge.client.forms.form == "json_object_schema" and engine.judge.client.forms.settled
    assert sum("rejected response_format form json_schema" in r.message for r in caplog.records) == 1


async def test_a_server_that_takes_no_form_gets_no_response_format(make_stub_judge) -> None:
    stub = await make_stub_judge(reject_forms=("json_schema", "json_object_schema", "json_object"), reject_status=400)
    result = await score(stub)
    assert len(result.verdicts) == 3
    assert "response_format" not in stub.recent[-1].body
    assert stub.stats.forms == {"json_schema": 2, "json_object_schema": 1, "json_object": 1, "off": 2}


async def test_a_content_error_does_not_talk_the_client_out_of_the_form(stub_judge: StubJudge) -> None:
    # The stub answers 400 to a request without a data block; the probe in the same form is
    # answered 200, so the request was at fault, not the form: the error stands, the form stays.
    engine = engine_for(stub_judge, max_retries=0)
    client = engine.judge.client
    with pytest.raises(JudgeError) as caught:
        await client.complete([ChatMessage("user", "no data block here")], max_tokens=10, schema=verdict_schema([0]))
    await engine.aclose()
    assert caught.value.kind == "client_error"
    assert client.forms.form == "json_schema" and client.forms.settled
    assert stub_judge.stats.forms == {"json_schema": 2}


async def test_one_based_indices_are_mapped_not_shifted(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("one_based",))
    result = await score(stub, structured_output="json_object")  # no schema: the model numbers from 1
    assert [v.relevant for v in result.verdicts] == [True, False, True]
    assert result.usage.calls == 1 and stub.stats.faults == {"one_based": 1}


async def test_a_schema_rules_out_wrong_shapes(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("wrong_shape", "one_based"))
    result = await score(stub)
    assert [v.relevant for v in result.verdicts] == [True, False, True]
    assert result.usage.calls == 1 and stub.stats.faults == {}


async def test_a_reask_says_what_was_wrong(make_stub_judge) -> None:
    # Every answer misshapen, in turn: bare indices, `text` for `verdict`, indices as strings
    # (which are read as they are).
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("wrong_shape",))
    result = await score(stub, structured_output="json_object")
    prompts = [r.body["messages"][-1]["content"] for r in stub.recent]
    assert len(prompts) == 3 and "Your previous answer" not in prompts[0]
    assert "not a bare number" in prompts[1]
    assert "the verdict for context_index 0 was missing" in prompts[2]
    assert [v.relevant for v in result.verdicts] == [True, False, True] and result.usage.calls == 3


async def test_a_failed_sample_carries_what_it_cost(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("malformed",))
    with pytest.raises(JudgeBadResponse) as caught:
        await score(stub)
    prompts = [r.body["messages"][-1]["content"] for r in stub.recent]
    assert len(prompts) == 3 and "was not the JSON object asked for" in prompts[1]
    usage = caught.value.usage
    assert usage is not None and usage.calls == 3
    assert usage.prompt_tokens == stub.stats.prompt_tokens and usage.completion_tokens == stub.stats.completion_tokens


async def test_failed_samples_keep_their_cost_in_records_and_the_summary(make_stub_judge) -> None:
    stub = await make_stub_judge(error_rate=1.0, fault_kinds=("malformed",))
    tally = JudgeTally()
    engine = engine_for(stub, tally, price_per_mtok=(1000.0, 2000.0))
    lines = [(1, json.dumps({"query": QUERY, "contexts": CONTEXTS, "output": ANSWER}).encode())]
    records: list[dict[str, Any]] = []
    summary = await score_events(jsonl_events(lines), engine, concurrency=1, window=4, write=lambda r: records.append(r) or True)
    await engine.aclose()
    judge = records[0]["judge"]
    assert records[0]["error"]["type"] == "bad_response"
    assert judge["calls"] == 3 and judge["prompt_tokens"] == stub.stats.prompt_tokens
    expected = (stub.stats.prompt_tokens * 1000.0 + stub.stats.completion_tokens * 2000.0) / 1e6
    assert judge["cost_usd"] == pytest.approx(expected) and tally.cost_usd == pytest.approx(expected)
    assert summary.failed_calls == 3 and summary.failed_cost_usd == pytest.approx(expected)
    assert "of which the failed samples' 3 calls" in summary.text("events.jsonl", "openai/stub", tally)


async def test_a_cut_off_answer_is_asked_again_with_more_room(make_stub_judge) -> None:
    stub = await make_stub_judge(verbose_reasons=True)
    long_contexts = [c + " " + "More detail follows here. " * 20 for c in CONTEXTS]
    engine = engine_for(stub, structured_output="json_object")
    result = await engine.score(QUERY, long_contexts, output=ANSWER)
    await engine.aclose()
    first, second = (r.body for r in stub.recent)
    assert stub.stats.cut == 1 and second["max_tokens"] == 2 * first["max_tokens"]
    assert "cut off" in second["messages"][-1]["content"]
    assert [v.relevant for v in result.verdicts] == [True, False, True] and result.usage.calls == 2


async def test_with_a_schema_reasons_stay_short_enough_to_fit(make_stub_judge) -> None:
    stub = await make_stub_judge(verbose_reasons=True)
    long_contexts = [c + " " + "More detail follows here. " * 20 for c in CONTEXTS]
    engine = engine_for(stub)
    result = await engine.score(QUERY, long_contexts, output=ANSWER)
    await engine.aclose()
    assert stub.stats.cut == 0 and result.usage.calls == 1


async def _one_slot_run(stub: StubJudge, **options: Any) -> tuple[JudgeTally, list[dict[str, Any]]]:
    tally = JudgeTally()
    engine = engine_for(stub, tally, timeout_s=1.0, **options)
    lines = [(i, json.dumps({"query": f"{QUERY} {i}", "contexts": CONTEXTS, "output": ANSWER}).encode())
             for i in range(1, 25)]
    records: list[dict[str, Any]] = []
    await score_events(jsonl_events(lines), engine, concurrency=16, window=64, write=lambda r: records.append(r) or True)
    await engine.aclose()
    return tally, records


async def test_a_one_slot_server_gets_about_one_request_at_a_time_and_no_timeouts(make_stub_judge) -> None:
    stub = await make_stub_judge(slots=1, latency_ms=120)
    tally, records = await _one_slot_run(stub)  # default settings: 16 samples and requests at once
    assert [r["error"] for r in records] == [None] * 24
    assert tally.failed_by_outcome == {} and tally.requests == 24
    assert stub.stats.dropped == 0


async def test_without_adaptive_concurrency_the_same_server_times_out(make_stub_judge) -> None:
    # The comparison that shows the test above can fail: 16 requests queue behind one slot.
    stub = await make_stub_judge(slots=1, latency_ms=120)
    tally, records = await _one_slot_run(stub, adaptive_concurrency=False, max_retries=0)
    assert tally.failed_by_outcome["timeout"] > 0
    assert any(r["error"] and r["error"]["type"] == "timeout" for r in records)
    assert stub.stats.dropped > 0  # abandoned requests the server found gone when their turn came


async def test_time_in_the_servers_queue_behind_our_own_requests_is_not_a_timeout(make_stub_judge) -> None:
    # Each request alone takes 0.8 s and the timeout is 1.2 s: once the limit lets a second
    # request go out beside the first (slow start does), that one waits 0.8 s in the server's
    # queue and needs 1.6 s. Its allowance, the requests of ours ahead of it at the latency seen
    # alone, keeps it from being abandoned. (Whole seconds, not tenths: 0.4 s of slack holds on a
    # busy 2-core machine where 0.15 s did not.)
    stub = await make_stub_judge(slots=1, latency_ms=800)
    tally = JudgeTally()
    engine = engine_for(stub, tally, timeout_s=1.2, max_retries=0)
    lines = [(i, json.dumps({"query": f"{QUERY} {i}", "contexts": CONTEXTS, "output": ANSWER}).encode())
             for i in range(1, 9)]
    records: list[dict[str, Any]] = []
    await score_events(jsonl_events(lines), engine, concurrency=16, window=64, write=lambda r: records.append(r) or True)
    await engine.aclose()
    assert [r["error"] for r in records] == [None] * 8
    assert tally.failed_by_outcome == {} and stub.stats.dropped == 0
    assert stub.stats.max_queued >= 2  # the limit did go above one: the allowance was used


def test_the_queue_allowance_is_the_requests_ahead_at_the_latency_seen_alone() -> None:
    limit = AdaptiveLimit(8)
    assert limit.queue_allowance(3) == 0.0  # nothing seen alone yet: no allowance
    limit.answered(2.0, 100, sent_with=1)
    assert limit.queue_allowance(1) == 0.0
    assert limit.queue_allowance(3) == pytest.approx(4.0)
    limit.answered(9.0, 100, sent_with=3)  # a queued answer does not change the time alone
    assert limit.queue_allowance(2) == pytest.approx(2.0)


def test_forms_are_the_documented_order() -> None:
    assert FORMS == ("json_schema", "json_object_schema", "json_object", "off")
