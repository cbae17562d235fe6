"""The service graph: start and stop order derived from the edges (consumers start first,
producers finish first, a wave side by side, every stage finishes before any closes), a failed
start stopping what started, and the sidecar's own graph wiring the stages in the order the
shutdown semantics need."""
from __future__ import annotations

import asyncio

import pytest
from ctxprec.collector.components import Deadline
from ctxprec.collector.pipeline import Pipeline
from ctxprec.collector.service_graph import ServiceGraph

from tests.collector.rag_app import serve_config


class Recorder:
    def __init__(self, name: str, calls: list[str], *, fail_start: bool = False, fail_finish: bool = False,
                 finish_s: float = 0.0) -> None:
        self.name, self.calls = name, calls
        self.fail_start, self.fail_finish, self.finish_s = fail_start, fail_finish, finish_s
        self.deadline: Deadline | None = None

    async def start(self) -> None:
        self.calls.append(f"start {self.name}")
        if self.fail_start:
            raise RuntimeError(f"{self.name} cannot start")

    async def finish(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.calls.append(f"finish {self.name}")
        await asyncio.sleep(self.finish_s)
        self.calls.append(f"finished {self.name}")
        if self.fail_finish:
            raise RuntimeError(f"{self.name} cannot finish")

    async def close(self) -> None:
        self.calls.append(f"close {self.name}")


def chain(calls: list[str], **options: dict) -> tuple[ServiceGraph, dict[str, Recorder]]:
    """receiver -> assembly -> fanout -> {sink_a, sink_b}; forwarder -> sink_b (an ordering edge)."""
    graph = ServiceGraph()
    parts = {name: Recorder(name, calls, **options.get(name, {}))
             for name in ("receiver", "assembly", "fanout", "forwarder", "sink_b")}
    for name, part in parts.items():
        graph.add(name, part, grace_s=1.0 if name == "sink_b" else 0.0)
    graph.connect("receiver", "assembly", "TraceConsumer")
    graph.connect("assembly", "fanout", "RetrievalSink")
    graph.connect("fanout", "forwarder", "ResultSink")
    graph.connect("fanout", "sink_b", "ResultSink")
    graph.connect("forwarder", "sink_b", "its span first")
    return graph, parts


async def test_consumers_start_first_producers_finish_first_and_closing_waits_for_every_finish() -> None:
    calls: list[str] = []
    graph, parts = chain(calls)
    await graph.start()
    assert calls == ["start sink_b", "start forwarder", "start fanout", "start assembly", "start receiver"]
    calls.clear()
    deadline = Deadline.after(5.0)
    await graph.stop(deadline)
    order = ["receiver", "assembly", "fanout", "forwarder", "sink_b"]
    assert calls == ([c for name in order for c in (f"finish {name}", f"finished {name}")]
                     + [f"close {name}" for name in order])
    assert parts["receiver"].deadline == deadline
    assert parts["sink_b"].deadline == deadline.later(1.0)  # its grace past the shared deadline


async def test_stages_of_one_wave_finish_side_by_side() -> None:
    calls: list[str] = []
    graph = ServiceGraph()
    graph.add("fanout", Recorder("fanout", calls))
    for name in ("phoenix", "langfuse"):
        graph.add(name, Recorder(name, calls, finish_s=0.2))
        graph.connect("fanout", name, "ResultSink")
    await graph.start()
    calls.clear()
    await graph.stop(Deadline.after(1.0))
    assert calls[:6] == ["finish fanout", "finished fanout", "finish phoenix", "finish langfuse",
                         "finished phoenix", "finished langfuse"]


async def test_a_failed_start_stops_what_started_and_raises() -> None:
    calls: list[str] = []
    graph, _ = chain(calls, fanout={"fail_start": True})
    with pytest.raises(RuntimeError, match="fanout cannot start"):
        await graph.start()
    # The sinks started, the failing stage is stopped too (it may hold half of what it opened);
    # the inputs never started and are not stopped.
    assert [c for c in calls if c.startswith("close")] == ["close fanout", "close forwarder", "close sink_b"]
    assert not any("receiver" in c or "assembly" in c for c in calls)


async def test_a_stage_failing_to_finish_is_logged_and_the_rest_still_stop(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    graph, _ = chain(calls, assembly={"fail_finish": True})
    await graph.start()
    await graph.stop(Deadline.after(1.0))
    assert "error while stopping assembly" in caplog.text
    assert [c for c in calls if c.startswith("close")] == [
        "close receiver", "close assembly", "close fanout", "close forwarder", "close sink_b"]


def test_a_cycle_or_an_unknown_stage_is_refused() -> None:
    graph = ServiceGraph()
    graph.add("a", Recorder("a", []))
    graph.add("b", Recorder("b", []))
    with pytest.raises(ValueError, match="no stage 'c'"):
        graph.connect("a", "c", "ResultSink")
    with pytest.raises(ValueError, match="declared twice"):
        graph.add("a", Recorder("a", []))
    graph.connect("a", "b", "ResultSink")
    graph.connect("b", "a", "ResultSink")
    with pytest.raises(ValueError, match="cycle"):
        graph.waves()


def _wave_of(pipeline: Pipeline) -> dict[str, int]:
    return {stage.name: i for i, wave in enumerate(pipeline.graph.waves()) for stage in wave}


def test_the_sidecar_graph_orders_what_shutdown_needs() -> None:
    config = serve_config("--kafka-bootstrap", "127.0.0.1:9", "--kafka-topic", "rag", "--kafka-format", "rag_event",
                          "--kafka-results-topic", "rag.scores", "--write-back", "span",
                          "--forward-to", "http://127.0.0.1:9/v1/traces", "--sink", "phoenix=http://127.0.0.1:9",
                          "--redact-pii")
    pipeline = Pipeline(config)
    wave = _wave_of(pipeline)
    stages = pipeline.graph.stages
    # Inputs finish first, then assembly, the gate, scoring, the redaction and the fan-out in turn.
    assert wave["otlp_grpc"] == wave["otlp_http"] == wave["kafka"] == 0
    assert wave["ingest"] < wave["gate"] < wave["workers"] < wave["redaction"] < wave["fanout"]
    assert wave["workers"] < wave["engine"]  # the judge client outlives the workers using it
    # The exporters flush after every decision was made; the span forwarder before the sinks.
    assert wave["fanout"] < wave["kafka_results"] == wave["span_writeback"] < wave["sink_phoenix"]
    # An extension: started after every stage (its port answering means the sidecar is up), stopped
    # after every stage (it answers until the end).
    assert wave["metrics_server"] == max(wave.values()) and pipeline.graph.waves()[-1] == [stages["metrics_server"]]
    assert pipeline.graph.start_order()[-1].name == "metrics_server"
    assert stages["span_writeback"].grace_s == stages["sink_phoenix"].grace_s == 1.0
    # The fan-out's sinks are the graph's ResultSink edges out of it, in declaration order.
    fed = [e.target for e in pipeline.graph.edges if e.source == "fanout"]
    assert [stages[name].component for name in fed] == pipeline.fanout.sinks
    assert fed[0] == "metrics" and "kafka_results" in fed
    links = {(k.source, k.target) for k in pipeline.graph.links}
    assert {("drift", "gate"), ("diagnostics", "drift"), ("kafka", "fanout"), ("kafka_results", "kafka")} <= links
    assert pipeline.drift.observers == [pipeline.sampler.observe]
    assert pipeline.drift.on_alarm is pipeline.diagnostics.explainer
    assert pipeline.kafka_receiver.commits.barrier == pipeline.kafka_results.flush
    assert [check.name for check in pipeline.metrics_server.checks] == [
        "OtlpGrpcReceiver", "OtlpHttpReceiver", "kafka", "judge"]
