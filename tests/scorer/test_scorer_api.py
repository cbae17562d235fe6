"""The library's public API: construction errors, context resolution, reference choice."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from ctxprec.collector.stub_judge import StubJudge, parse_data_block
from ctxprec.scorer import ScoreResult, create_context_precision_scorer


def stub_scorer(stub: StubJudge, **kwargs: Any):
    return create_context_precision_scorer("openai/stub-judge", api_base=stub.url, api_key="t", **kwargs)


def last_data(stub: StubJudge) -> dict[str, Any]:
    return parse_data_block(stub.recent[-1].body["messages"])


def test_construction_errors_have_the_exact_texts() -> None:
    with pytest.raises(ValueError) as neither:
        create_context_precision_scorer("local")
    assert str(neither.value) == "Either context or context_extractor is required for context precision scoring"
    with pytest.raises(ValueError) as empty:
        create_context_precision_scorer("local", context=[])
    assert str(empty.value) == "Context array cannot be empty if provided"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context": "one string"}, "context: must be a list of strings"),
        ({"context": ["ok", 3]}, "context: item 1 must be a string"),
        ({"context": ["ok"], "scale": -2}, "scale: must be a finite number >= 0"),
        ({"context": ["ok"], "max_context_chars": 0}, "max_context_chars: must be an integer >= 1"),
        ({"context": ["ok"], "temprature": 0.1}, "unknown judge option(s) temprature"),
        ({"context_extractor": "not callable"}, "context_extractor: must be a callable"),
    ],
)
def test_bad_options_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        create_context_precision_scorer("local", **kwargs)
    assert message in str(info.value)


async def test_extractor_takes_precedence_and_sees_input_and_output(stub_judge: StubJudge) -> None:
    seen: list[tuple[Any, Any]] = []

    def extractor(input: Any, output: Any) -> list[str]:
        seen.append((input, output))
        return ["[relevant] from the extractor", "[irrelevant] also from the extractor"]

    scorer = stub_scorer(stub_judge, context=["[relevant] fixed context"], context_extractor=extractor)
    try:
        result = await scorer.run("What is it?", "It is a thing.")
    finally:
        await scorer.aclose()
    assert seen == [("What is it?", "It is a thing.")]
    assert [c["text"] for c in last_data(stub_judge)["contexts"]] == [
        "[relevant] from the extractor",
        "[irrelevant] also from the extractor",
    ]
    assert (result.k, result.score) == (2, 1.0)


async def test_async_extractor_is_awaited(stub_judge: StubJudge) -> None:
    async def extractor(input: Any, output: Any) -> list[str]:
        await asyncio.sleep(0)
        return ["[irrelevant] a", "[relevant] b"]

    scorer = stub_scorer(stub_judge, context_extractor=extractor)
    try:
        result = await scorer.run("q")
    finally:
        await scorer.aclose()
    assert result.score == 0.5 and result.first_relevant_rank == 2


@pytest.mark.parametrize("empty", [[], None])
async def test_empty_resolved_context_fails_without_a_judge_call(stub_judge: StubJudge, empty: Any) -> None:
    scorer = stub_scorer(stub_judge, context_extractor=lambda i, o: empty)
    try:
        with pytest.raises(ValueError) as info:
            await scorer.run("What is it?", "answer")
    finally:
        await scorer.aclose()
    assert str(info.value) == "No context available for evaluation"
    assert stub_judge.stats.requests == 0


async def test_reference_kind_follows_expected_output_then_output_then_query(stub_judge: StubJudge) -> None:
    scorer = stub_scorer(stub_judge, context=["Paris is the capital of France.", "Bananas are yellow."])
    try:
        with_expected = await scorer.run("capital?", output="Lyon maybe", expected_output="Paris is the capital")
        sent_expected = last_data(stub_judge)
        with_output = await scorer.run("capital?", output="Paris is the capital")
        sent_output = last_data(stub_judge)
        query_only = await scorer.run("What is the capital of France?")
        sent_query = last_data(stub_judge)
    finally:
        await scorer.aclose()
    assert (with_expected.reference_kind, sent_expected["reference_kind"], sent_expected["reference"]) == (
        "expected_output", "expected_output", "Paris is the capital")
    assert (with_output.reference_kind, sent_output["reference"]) == ("output", "Paris is the capital")
    assert (query_only.reference_kind, sent_query["reference_kind"]) == ("query", "query")
    assert "to the query" in query_only.reason
    assert [v.relevant for v in query_only.verdicts] == [True, False]


async def test_chat_message_input_uses_the_first_user_message(stub_judge: StubJudge) -> None:
    scorer = stub_scorer(stub_judge, context=["[relevant] x"])
    messages = [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "first question"},
        {"role": "user", "content": "second question"},
    ]
    try:
        await scorer.run(messages)
        assert last_data(stub_judge)["query"] == "first question"
        await scorer.run({"inputMessages": [{"role": "user", "content": "seed style"}]})
        assert last_data(stub_judge)["query"] == "seed style"
        with pytest.raises(ValueError, match="input: must be the query string or chat messages"):
            await scorer.run({"nothing": 1})
    finally:
        await scorer.aclose()


def test_run_sync_with_the_local_judge() -> None:
    scorer = create_context_precision_scorer(
        context=["The Eiffel Tower is 330 metres tall.", "Bananas are rich in potassium."], scale=10
    )
    try:
        result = scorer.run_sync("How tall is the Eiffel Tower?", "It is 330 metres tall.")
        again = scorer.run_sync("How tall is the Eiffel Tower?", "It is 330 metres tall.")
    finally:
        scorer.close()
    assert isinstance(result, ScoreResult)
    assert (result.score, result.scale, result.k, again.score) == (10.0, 10, 2, 10.0)
    assert result.reason.startswith("The score is 10 because")
    assert scorer.engine.annotator_kind == "CODE"


def test_fingerprint_is_stable_and_tracks_the_configuration() -> None:
    a = create_context_precision_scorer(context=["x"]).fingerprint
    b = create_context_precision_scorer(context=["y"]).fingerprint
    c = create_context_precision_scorer(context=["x"], scale=10).fingerprint
    d = create_context_precision_scorer(context=["x"], max_context_chars=100).fingerprint
    assert a == b and len({a, c, d}) == 3


def test_import_is_light() -> None:
    code = "import sys, ctxprec.scorer; print(any(m.startswith('litellm') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False"


def test_structured_output_feeds_the_extractor_and_the_reference() -> None:
    agent_output = {"text": "Insulin lowers blood sugar.", "metadata": {"retrievedContext": ["Insulin lowers blood sugar.", "Cats purr."]}}
    scorer = create_context_precision_scorer(context_extractor=lambda i, o: o["metadata"]["retrievedContext"])
    try:
        result = scorer.run_sync("What does insulin do?", agent_output)
        metadata_only = scorer.run_sync("What does insulin do?", {"metadata": agent_output["metadata"]})
        with pytest.raises(ValueError, match="output: must be a string, a message dict or a list of messages"):
            scorer.run_sync("What does insulin do?", 42)
    finally:
        scorer.close()
    assert (result.reference_kind, result.k, [v.relevant for v in result.verdicts]) == ("output", 2, [True, False])
    assert metadata_only.reference_kind == "query"
