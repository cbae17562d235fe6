"""The JavaScript apps' matrix and one cell's run through real sidecars.

`CELLS` is every app x shape the real-traffic tests run; `MAPPINGS` the user mappings
(`conventions.mappings`) of the apps whose retrieval has a shape of their own. `observe(cell)`
runs one cell as tests/realtraffic/test_frameworks.py runs the Python apps: the app exports with
the real OTLP exporters to two `ctxprec serve` pipelines in this process (one scoring against the
stub judge over HTTP and forwarding to a real OTLP receiver, one sampling nothing), and returns
what each saw. The tests assert on it; `python -m tests.realtraffic.js_figures` tabulates it.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ctxprec.collector.model import Outcome
from ctxprec.collector.stub_judge import StubJudge
from tests.collector.rag_app import running, scrape, serve_config, wait_until
from tests.helpers.framework_apps import AppRun
from tests.helpers.js_apps import JsCell, run_js_app
from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.scored_like_batch import Outcomes, judge_flags, metrics_text

SHAPES = ("direct", "http")
MASTRA_VERSIONS = ("1.71", "1.70")
AISDK_APPS = ("aisdk6-generate-text", "aisdk6-stream-text", "aisdk6-generate-object", "aisdk7-otel", "aisdk7-legacy")

CELLS: tuple[JsCell, ...] = (
    *(JsCell(app, shape, "protobuf", version) for app in ("mastra-vector", "mastra-graph")
      for version in MASTRA_VERSIONS for shape in SHAPES),
    *(JsCell("mastra-vector", shape, "json") for shape in SHAPES),
    *(JsCell(app, shape) for app in ("mastra-tool", "mastra-workflow") for shape in SHAPES),
    *(JsCell(app, shape, retrieval=retrieval) for app in AISDK_APPS for retrieval in ("openinference", "genai")
      for shape in SHAPES),
    *(JsCell("aisdk7-otel", shape, "json") for shape in SHAPES),
    *(JsCell("langchain-openinference", shape) for shape in SHAPES),
)
# GenAI retrieval spans whose documents carry only `id` and `score`: decided `no_content`.
NO_CONTENT_CELLS: tuple[JsCell, ...] = tuple(JsCell("aisdk6-generate-text", shape, retrieval="genai-ids")
                                             for shape in SHAPES)

# The apps' own shapes, read through `conventions.mappings` entries (the YAML list, as a user
# writes it). The workflow's entry is the one the docs show; the tool's names the tool's span.
MAPPINGS: dict[str, list[dict[str, Any]]] = {
    "mastra-workflow": [{
        "name": "retrieve-step",
        "when": {"mastra.workflow_step.step_id": "retrieve"},
        "query": "mastra.workflow_step.input$.question",
        "contexts": "mastra.workflow_step.output$.documents[*].text",
    }],
    "mastra-tool": [{
        "name": "manual-lookup",
        "when": {"gen_ai.tool.name": "lookupManual"},
        "query": "gen_ai.tool.call.arguments$.question",
        "contexts": "gen_ai.tool.call.result$.documents[*].text",
        "ids": "gen_ai.tool.call.result$.documents[*].id",
    }],
}


@dataclass
class Observation:
    cell: JsCell
    service: str
    runs: list[AppRun]
    decisions: dict[str, int]  # the scoring sidecar's decisions
    unsampled: dict[str, int]  # the sidecar that samples nothing
    outcomes: list[Outcome]
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    capture: OtlpCapture
    notes: list[str] = field(default_factory=list)  # waits that timed out

    def matches(self, run: AppRun, outcome: Outcome) -> bool:
        """Found as the app did it: contexts in rank order, the model's answer, clean, from an LLM span."""
        r = outcome.retrieval
        return ([c.content for c in r.contexts] == run.contexts and r.output == run.answer
                and r.answer_source == "llm_span" and r.answer_clean)


def cell_config(cell: JsCell) -> dict[str, Any] | None:
    """The YAML config a cell's sidecars run with: its mappings, if it has any."""
    mappings = MAPPINGS.get(cell.app)
    return {"conventions": {"mappings": mappings}} if mappings else None


def config_flags(config: dict[str, Any] | None, tmp_path: Path) -> list[str]:
    if config is None:
        return []
    path = tmp_path / "ctxprec.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return ["--config", str(path)]


async def _wait(predicate: Any, timeout: float, what: str, notes: list[str]) -> None:
    try:
        await wait_until(predicate, timeout=timeout, what=what)
    except AssertionError as exc:
        notes.append(str(exc))


async def observe(cell: JsCell, stub: StubJudge, tmp_path: Path, *, expected: int = 3, timeout: float = 60.0,
                  config: dict[str, Any] | None = None) -> Observation:
    """Runs one cell through a scoring and a counting sidecar (with `config`, default the cell's);
    waits (up to `timeout` each) for `expected` decisions in both and as many scored spans
    downstream, then a moment for extra ones."""
    extra = config_flags(config or cell_config(cell), tmp_path)
    counting = serve_config(*judge_flags(stub), *extra, "--sample-rate", "0")  # a config error raises here
    capture = await OtlpCapture().start()
    service = f"js-{cell.name}"
    scoring = serve_config(*judge_flags(stub), *extra, "--forward-to", capture.http_url, "--write-back", "span")
    outcomes = Outcomes()
    notes: list[str] = []
    try:
        async with running(scoring) as pipeline, running(counting) as counter:
            pipeline.add_sink(outcomes)
            runs = await run_js_app(cell, service=service, endpoints=[
                f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces",
                f"http://127.0.0.1:{counter.otlp_http_port}/v1/traces"])
            await _wait(lambda: sum(pipeline.fanout.counts.values()) >= expected, timeout,
                        "a decision for every retrieval", notes)
            await _wait(lambda: sum(counter.fanout.counts.values()) >= expected, timeout,
                        "every unsampled retrieval counted", notes)
            if pipeline.fanout.counts.get("evaluated"):
                await _wait(lambda: len(capture.find_spans("gen_ai.evaluation.name", "context_precision"))
                            >= pipeline.fanout.counts["evaluated"], timeout, "scored spans downstream", notes)
            await asyncio.sleep(0.5)  # a second (wrong) decision would show up now
            metrics = scrape(await metrics_text(pipeline))
            decisions, unsampled = pipeline.fanout.counts, counter.fanout.counts
    except BaseException:
        await capture.stop()
        raise
    return Observation(cell, service, runs, decisions, unsampled, outcomes.items, metrics, capture, notes)
