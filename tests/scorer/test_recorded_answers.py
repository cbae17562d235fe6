"""The judge's answer handling on answers recorded from a real model: SmolLM2-135M-Instruct on
llama-cpp-python 0.3.36's server, one answer per committed sample without a schema (json_object)
and one with it (json_object_schema). How they were recorded: tests/llm_judge/record_answers.py
(temperature 0, the judge's own prompt and first max_tokens).

Without a schema none of the 20 answers is usable as it stands: `text` where `verdict` should be,
bare index lists, answers cut off at max_tokens because the model copies the contexts. With the
schema all 20 are complete in one call."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pytest

from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.judge.chat import ChatMessage, ChatResponse
from ctxprec.scorer.judge.llm import LLMJudge
from ctxprec.scorer.judge.verdicts import MalformedAnswer, parse_verdicts

FIXTURE = Path(__file__).with_name("fixtures") / "smollm2_answers.jsonl"
ANSWERS = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
SAMPLES = [json.loads(line) for line in
           (Path(__file__).parents[1] / "llm_judge" / "samples.jsonl").read_text(encoding="utf-8").splitlines()]


def answers(form: str) -> list[dict[str, Any]]:
    found = [a for a in ANSWERS if a["form"] == form]
    assert len(found) == len(SAMPLES) >= 17
    return found


@pytest.mark.parametrize("answer", answers("json_object_schema"), ids=lambda a: f"sample{a['sample']}")
def test_every_answer_under_the_schema_is_complete(answer: dict[str, Any]) -> None:
    parsed = parse_verdicts(answer["content"], answer["indices"])
    assert parsed.unresolved == [] and sorted(parsed.verdicts) == answer["indices"]
    assert answer["finish_reason"] == "stop"


@pytest.mark.parametrize("answer", answers("json_object"), ids=lambda a: f"sample{a['sample']}")
def test_without_a_schema_nothing_is_taken_that_the_answer_did_not_say(answer: dict[str, Any]) -> None:
    try:
        parsed = parse_verdicts(answer["content"], answer["indices"])
    except MalformedAnswer as exc:
        # What the judge does next depends on why: a cut-off answer gets more room.
        assert answer["finish_reason"] == "length" or "does not parse" in str(exc) or "no" in str(exc)
        return
    entries = json.loads(answer["content"])["verdicts"]
    shift = 1 if parsed.one_based else 0
    said = {e["context_index"] - shift: e["verdict"].lower() == "yes" for e in entries
            if isinstance(e, dict) and isinstance(e.get("context_index"), int)
            and str(e.get("verdict", "")).lower() in ("yes", "no")}
    assert {i: v.relevant for i, v in parsed.verdicts.items()} == {i: said[i] for i in parsed.verdicts}
    assert sorted([*parsed.verdicts, *parsed.unresolved]) == answer["indices"]
    assert parsed.problem()  # whatever was wrong can be told to the model in a re-ask


def test_the_recorded_failures_are_the_ones_seen_from_real_models() -> None:
    kinds = set()
    for answer in answers("json_object"):
        try:
            parsed = parse_verdicts(answer["content"], answer["indices"])
        except MalformedAnswer:
            kinds.add("cut off" if answer["finish_reason"] == "length" else "not JSON")
            continue
        if parsed.shapes:
            kinds.add("bare indices")
        if parsed.bad_words:
            kinds.add("no verdict word")
        assert parsed.unresolved  # none of them complete
    assert {"cut off", "bare indices", "no verdict word"} <= kinds


class Replay:
    """A ChatClient that answers with recorded answers, in turn, and keeps what it was asked."""

    model = "openai/smollm2"

    def __init__(self, replies: Sequence[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.asked: list[tuple[list[ChatMessage], int | None, dict[str, Any] | None]] = []

    async def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int | None = None,
                       json_mode: bool = True, schema: dict[str, Any] | None = None) -> ChatResponse:
        self.asked.append((list(messages), max_tokens, schema))
        reply = self.replies.pop(0)
        return ChatResponse(reply["content"], 400, reply["completion_tokens"], 0.0, 1.0, 1, reply["finish_reason"])

    async def aclose(self) -> None:
        return None


async def replay(number: int) -> tuple[Any, Replay, dict[str, Any]]:
    """The judge on sample `number`: first the answer recorded without a schema, then (for the
    re-ask) the one recorded with it."""
    first = next(a for a in answers("json_object") if a["sample"] == number)
    good = next(a for a in answers("json_object_schema") if a["sample"] == number)
    client = Replay([first, good])
    judge = LLMJudge(client, JudgeConfig(model="openai/smollm2", api_base="http://x", cache_size=0))
    sample = SAMPLES[number - 1]
    outcome = await judge.judge(sample["query"], sample["contexts"], reference_kind="output",
                                reference=sample["output"])
    assert len(outcome.verdicts) == len(sample["contexts"]) and outcome.usage.calls == 2
    return outcome, client, sample


@pytest.mark.parametrize("number", [a["sample"] for a in answers("json_object") if a["finish_reason"] == "length"])
async def test_a_recorded_cut_off_answer_is_asked_again_with_more_room(number: int) -> None:
    _, client, _ = await replay(number)
    (_, first_room, _), (again, second_room, _) = client.asked
    assert second_room == 2 * first_room and "cut off" in again[-1].content


@pytest.mark.parametrize("number", [a["sample"] for a in answers("json_object") if a["finish_reason"] == "stop"][:6])
async def test_a_recorded_misshapen_answer_is_reasked_saying_what_was_wrong(number: int) -> None:
    _, client, _ = await replay(number)
    assert "Your previous answer could not be used:" in client.asked[1][0][-1].content
