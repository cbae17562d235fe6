"""Which LLM span consumed a retrieval, on Pydantic AI's captured spans (tests/helpers/huge_trace.py):
decided by the trace's structure and the prompts first, the clocks only breaking ties within
`assembly.clock_tolerance_s`; and read in work that grows with the trace, not with its square."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ctxprec.collector.assembly import answers
from ctxprec.collector.assembly.config import AssemblyConfig
from ctxprec.collector.assembly.conventions import Conventions
from ctxprec.collector.assembly.spans import SpanRecord, span_record
from ctxprec.collector.assembly.trace_tree import TraceTree
from ctxprec.collector.loop_turns import LoopTurns

from tests.helpers.huge_trace import huge_trace, skewed_traces

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "agent_runs" / "pydantic-ai-genai.json"
ANSWERS = {run["query"]: run["answer"] for run in json.loads(RUNS.read_text())["runs"]}


def _records(spans: list) -> list[SpanRecord]:
    return [span_record(s, "support-agent", 20_000, {}) for s in spans]


def test_the_answer_of_an_llm_host_whose_clock_is_behind_is_used() -> None:
    # The answering call "starts" 20 ms before the retrieval (its host's clock 50 ms behind).
    for _, spans in skewed_traces(3):
        [found] = Conventions().extract(_records(spans))
        assert found.retrieval.answer_source == "llm_span"
        assert found.retrieval.output == ANSWERS[found.retrieval.query]


def test_without_a_tolerance_the_skewed_answer_is_not_taken() -> None:
    _, spans = skewed_traces(1)[0]
    [found] = Conventions(clock_tolerance_s=0).extract(_records(spans))
    assert found.retrieval.answer_source != "llm_span"
    assert found.retrieval.output != ANSWERS[found.retrieval.query]


def test_the_tolerance_is_an_assembly_setting_of_one_second() -> None:
    assert AssemblyConfig().clock_tolerance_s == 1.0
    with pytest.raises(ValueError, match="clock_tolerance_s"):
        AssemblyConfig(clock_tolerance_s=-1)


def test_each_retrieval_of_an_agent_trace_gets_the_answer_of_its_own_run() -> None:
    # The three captured questions retrieve overlapping documents, so later runs' prompts hold
    # this run's texts too: by time alone the last of them would be "the" answer of every one.
    _, spans = huge_trace(units=6)
    found = Conventions().extract(_records(spans))
    assert len(found) == 6
    for item in found:
        assert item.retrieval.answer_source == "llm_span"
        assert item.retrieval.output == ANSWERS[item.retrieval.query]


def test_a_huge_trace_reads_each_span_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2,001 spans, 50 retrievals: whether a span is an LLM call and what its prompt holds are read
    # once per span, however many retrievals look (not once per retrieval and span).
    _, spans = huge_trace(units=50)
    records = _records(spans)
    calls = {"llm_rule": 0, "llm_input_text": 0}
    for name in calls:
        real = getattr(answers, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(answers, name, counted)
    found = Conventions().extract(records)
    assert len(found) == 50 and all(f.retrieval.answer_source == "llm_span" for f in found)
    assert calls["llm_rule"] <= len(records)
    assert 0 < calls["llm_input_text"] <= len(records)


def test_the_tree_orders_every_span_once_whatever_the_ids() -> None:
    _, spans = huge_trace(units=2)
    records = _records(spans)
    # A cycle of hostile ids (two spans each the other's parent) and a repeated span id.
    a, b = records[0], records[1]
    cyclic = [SpanRecord(**{**_fields(a), "parent_span_id": b.span_id}),
              SpanRecord(**{**_fields(b), "parent_span_id": a.span_id})]
    twin = SpanRecord(**{**_fields(records[2])})
    tree = TraceTree([*cyclic, *records[2:], twin])
    order = tree.order()
    assert len(order) == len(records) + 1 and len({id(s) for s in order}) == len(order)
    for span in order:
        low, high = tree.interval(span)
        assert order[low] is span and low < high <= len(order)
    # Every ring of a span together covers the rest of the trace, but its ancestors.
    retrieval = next(s for s in records[2:] if s.name.startswith("execute_tool search"))
    covered = [i for ring in tree.rings(retrieval) for low, high in ring for i in range(low, high)]
    ancestors = {id(s) for s in tree.ancestors(retrieval)}
    assert sorted(covered) == [i for i, s in enumerate(order) if s is not retrieval and id(s) not in ancestors]


def _fields(span: SpanRecord) -> dict:
    return {name: getattr(span, name) for name in span.__dataclass_fields__}


async def test_reading_a_huge_trace_lets_the_loop_run_between_steps() -> None:
    # Every step (about 256 spans, or one retrieval) ends with a turn of the loop once the slice is
    # used: with a slice of 0, the other tasks run between every two steps.
    _, spans = huge_trace(units=20)
    records = _records(spans)
    turns_seen = 0
    reading = True

    async def other_task() -> None:
        nonlocal turns_seen
        while reading:
            turns_seen += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    start = turns_seen
    found = await Conventions().extract_sharing(records, None, LoopTurns(slice_s=0))
    reading = False
    await other
    assert [f.retrieval.span_id for f in found] == [f.retrieval.span_id for f in Conventions().extract(records)]
    assert turns_seen - start >= len(found) + len(records) // 256
