"""What the real-traffic tests check of every retrieval an app made: that `ctxprec serve` found it
as the app did it and scored it as `ctxprec score` scores the same query, contexts and answer.

Shared by the Python framework apps (tests/realtraffic/test_frameworks.py) and the JavaScript
ones (tests/realtraffic/test_js_apps.py): the outcome sink, the judge flags, the batch scores
(the CLI in its own process) and the per-retrieval assertions.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp

from ctxprec.collector.model import Outcome
from ctxprec.collector.pipeline import Pipeline
from ctxprec.collector.stub_judge import StubJudge
from tests.helpers.framework_apps import AppRun
from tests.helpers.otlp_capture import OtlpCapture


class Outcomes:
    """A result sink that keeps every outcome, to compare with what the app did."""

    def __init__(self) -> None:
        self.items: list[Outcome] = []

    def emit(self, outcome: Outcome) -> None:
        self.items.append(outcome)


def judge_flags(stub: StubJudge) -> list[str]:
    # Canary off: these tests count the judge's requests per scored retrieval.
    return ["--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "test-key",
            "--judge-canary-mode", "off"]


async def metrics_text(pipeline: Pipeline) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{pipeline.metrics_url}/metrics") as response:
            return await response.text()


class BatchScores:
    """`ctxprec score` (the CLI, in its own process) on the query, contexts and answer of runs.

    The stub judge's verdicts depend only on the texts, so a triple scored once is not scored
    again (the JavaScript apps retrieve and answer the same three questions alike)."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, tuple[str, ...], str], dict[str, Any]] = {}

    async def __call__(self, stub: StubJudge, runs: list[AppRun], tmp_path: Path) -> dict[str, float]:
        return {query: record["score"] for query, record in (await self.records(stub, runs, tmp_path)).items()}

    async def records(self, stub: StubJudge, runs: list[AppRun], tmp_path: Path) -> dict[str, dict[str, Any]]:
        """Each run's whole score record (verdicts, judge calls), by query. A run without an answer
        (`answer` empty: none was in the trace) is scored against its question alone."""
        new = [r for r in runs if _key(r) not in self._records]
        if new:
            await self._score(stub, new, tmp_path)
        return {r.query: self._records[_key(r)] for r in runs}

    async def _score(self, stub: StubJudge, runs: list[AppRun], tmp_path: Path) -> None:
        events = tmp_path / "events.jsonl"
        events.write_text("".join(json.dumps({"query": r.query, "contexts": r.contexts,
                                              **({"output": r.answer} if r.answer else {})}) + "\n"
                                  for r in runs), encoding="utf-8")
        out = tmp_path / "scores.jsonl"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ctxprec.collector.cli", "score", str(events), "-o", str(out),
            "--judge-model", "openai/stub", "--judge-api-base", stub.url,
            env={**os.environ, "OPENAI_API_KEY": "test-key"}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        _, stderr = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, stderr.decode()
        records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert [r["reference_kind"] for r in records] == ["output" if r.answer else "query" for r in runs], records
        for run, record in zip(runs, records):
            self._records[_key(run)] = record


def _key(run: AppRun) -> tuple[str, tuple[str, ...], str]:
    return (run.query, tuple(run.contexts), run.answer)


def assert_scored_like_the_batch(runs: list[AppRun], outcomes: list[Outcome], batch: dict[str, float],
                                 capture: OtlpCapture, service: str, answer_source: str = "llm_span") -> None:
    """Each run's retrieval: its contexts in rank order, the model's answer read cleanly from an
    LLM span (or the `answer_source` given), judged against it, the batch's score, and the scored
    span forwarded downstream."""
    by_query = {o.retrieval.query: o for o in outcomes}
    assert sorted(by_query) == sorted(r.query for r in runs)
    for run in runs:
        outcome = by_query[run.query]
        r, result = outcome.retrieval, outcome.result
        assert result is not None
        assert [c.content for c in r.contexts] == run.contexts  # rank order
        assert r.output == run.answer
        assert (r.answer_source, r.answer_clean, result.reference_kind) == (answer_source, True, "output")
        assert result.score == batch[run.query]
        scored = capture.span(r.span_id)
        assert scored is not None, f"scored span {r.span_id} not forwarded"
        attributes = scored.attributes
        assert attributes["gen_ai.evaluation.score.value"] == result.score
        assert attributes["ctxprec.reference_kind"] == "output"
        assert attributes["ctxprec.answer_source"] == answer_source
        assert scored.resource["service.name"] == service
