"""A trace split across replicas (the load-balancing exporter rerouting while the replicas are
resized, or a client that does not route by trace id): two in-process sidecars in span mode each
get part of the same traces. Each part is decided where it lands, no span is lost or sent twice,
and what the split cost shows in the counters: the retrieval is scored once, by the replica that
got the retrieval span, against the answer it could see (the chain's output) or, without it,
against the question alone (`ctxprec_reference_kind{reference_kind="query"}`)."""
from __future__ import annotations

import os
from collections import Counter

from ctxprec.collector.pipeline import Pipeline
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.collector.rag_app import running, serve_config, wait_until
from tests.helpers.otlp_capture import OtlpCapture
from tests.helpers.rag_traces import rag_trace, request_of

TRACES = 8


def _value(p: Pipeline, name: str, **labels: str) -> float:
    return p.metrics.registry.get_sample_value(name, labels) or 0.0


async def _send(p: Pipeline, request: ExportTraceServiceRequest) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://127.0.0.1:{p.otlp_http_port}/v1/traces", data=request.SerializeToString(),
                                headers={"Content-Type": "application/x-protobuf"}) as response:
            assert response.status == 200, await response.text()


async def test_each_part_of_a_split_trace_is_decided_where_it_lands(make_stub_judge) -> None:
    stub = await make_stub_judge()
    capture = await OtlpCapture().start()
    flags = ["--judge-model", "openai/stub", "--judge-api-base", stub.url, "--judge-api-key", "k",
             "--forward-to", capture.http_url, "--write-back", "span", "--sample-rate", "1"]
    try:
        async with running(serve_config(*flags)) as a, running(serve_config(*flags)) as b:
            sent: list[str] = []
            retrievers: set[str] = set()
            for i in range(TRACES):
                root, retriever, llm = rag_trace(os.urandom(16))
                retrievers.add(retriever.span_id.hex())
                # Half lose their LLM span to B, half their root and LLM span: A keeps the retriever.
                here, there = ([root, retriever], [llm]) if i % 2 == 0 else ([retriever], [root, llm])
                await _send(a, request_of(here))
                await _send(b, request_of(there))
                sent += [s.span_id.hex() for s in (root, retriever, llm)]
            await wait_until(lambda: len(capture.spans) >= len(sent), what="every span forwarded")
            await wait_until(lambda: _value(a, "ctxprec_samples_total", service="support-bot",
                                            decision="evaluated") == TRACES, what="every retrieval decided")
            # Nothing more trickles in: B had no retrieval to score, A scored each once.
            assert _value(b, "ctxprec_samples_total", service="support-bot", decision="evaluated") == 0
            assert _value(a, "ctxprec_spans_received_total", receiver="otlp_http") == 1.5 * TRACES
            assert _value(b, "ctxprec_spans_received_total", receiver="otlp_http") == 1.5 * TRACES
            kinds = {kind: _value(a, "ctxprec_reference_kind_total", service="support-bot", reference_kind=kind)
                     for kind in ("output", "query")}
            assert kinds == {"output": TRACES / 2, "query": TRACES / 2}
        forwarded = Counter(s.span_id for s in capture.spans)
        assert sorted(forwarded) == sorted(sent) and set(forwarded.values()) == {1}  # none lost, none twice
        scored = {s.span_id for s in capture.find_spans("gen_ai.evaluation.name", "context_precision")}
        assert scored == retrievers
    finally:
        await capture.stop()
