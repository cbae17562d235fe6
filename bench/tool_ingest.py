"""Unsampled agent traffic through assembly: what reading retrievals inside agent tools costs.

The requests are the captured agent apps' own (tests/fixtures/otlp: Pydantic AI, the OpenAI
Agents SDK, CrewAI, Google ADK, smolagents), each sent many times with fresh trace ids, decoded
and ingested in-process with nothing sampled (`OtlpIngest`, rate 0: the byte-level count of
unsampled retrievals, which decodes the resources holding tool spans). The figure is spans per
CPU-second set against a bare `ExportTraceServiceRequest.ParseFromString` of the same bodies,
measured around each round, and the retrievals counted `not_sampled`.

    .venv/bin/python -m bench.tool_ingest [--quick]
    .venv/bin/python -m bench.before_after tool_ingest --ref main --key ratio
"""
from __future__ import annotations

import argparse
import asyncio
import re
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, machine, write_result
from ctxprec.collector.assembly.ingest import OtlpIngest
from ctxprec.collector.metrics.registry import Metrics
from ctxprec.collector.sampling.sampler import Sampler
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

CAPTURES = ("pydantic-ai-genai", "pydantic-ai-weather", "openai-agents-chat", "openai-agents-responses",
            "crewai-openinference", "google-adk-native", "smolagents-openinference")
_TRACES = re.compile(r"^\d+\.pb$")


class Counting:
    """A RetrievalSink that only counts (nothing is sampled)."""

    def __init__(self) -> None:
        self.not_sampled_total = 0

    def submit(self, retrieval: Any) -> None:
        raise AssertionError("nothing is sampled at rate 0")

    def not_sampled(self, service: str, count: int) -> None:
        self.not_sampled_total += count


def bodies(copies: int) -> list[bytes]:
    """Each captured request `copies` times, with trace ids of their own (not late spans)."""
    out: list[bytes] = []
    folder = ROOT / "tests" / "fixtures" / "otlp"
    for n in range(copies):
        for name in CAPTURES:
            for path in sorted(p for p in (folder / name).iterdir() if _TRACES.match(p.name)):
                request = ExportTraceServiceRequest()
                request.ParseFromString(path.read_bytes())
                for rs in request.resource_spans:
                    for ss in rs.scope_spans:
                        for span in ss.spans:
                            span.trace_id = n.to_bytes(4, "big") + span.trace_id[4:]
                out.append(request.SerializeToString())
    return out


def parsed(body: bytes) -> tuple[ExportTraceServiceRequest, int]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return request, sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def bare(data: list[bytes]) -> float:
    start = time.process_time()
    spans = sum(parsed(body)[1] for body in data)
    return spans / (time.process_time() - start)


async def ingest(data: list[bytes]) -> tuple[float, int, int]:
    sink = Counting()
    ingest = OtlpIngest(keep_trace=Sampler(0.0).keep_trace, sink=sink, metrics=Metrics())
    start = time.process_time()
    spans = 0
    for body in data:
        request, count = parsed(body)
        spans += count
        await ingest.ingest(request, receiver="otlp_http", raw=body)
    cpu = time.process_time() - start
    return spans / cpu, spans, sink.not_sampled_total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer copies and rounds")
    args = parser.parse_args(argv)
    data = bodies(20 if args.quick else 100)
    rounds = []
    for _ in range(3 if args.quick else 5):
        before = bare(data)
        rate, spans, counted = asyncio.run(ingest(data))
        rounds.append({"spans_per_cpu_s": round(rate), "bare_parse_spans_per_s": round(max(before, bare(data))),
                       "spans": spans, "not_sampled": counted})
    ratios = sorted(r["spans_per_cpu_s"] / r["bare_parse_spans_per_s"] for r in rounds)
    result = {
        "benchmark": "tool_ingest",
        "description": __doc__.strip().splitlines()[0],
        "quick": args.quick,
        "machine": machine(),
        "captures": list(CAPTURES),
        "requests": len(data),
        "ratio": round(ratios[len(ratios) // 2], 3),
        "not_sampled": rounds[0]["not_sampled"],
        "rounds": rounds,
    }
    path = write_result("tool_ingest", result, quick=args.quick)
    print(f"spans per CPU-second / bare parse: {result['ratio']} (median of {len(rounds)}); "
          f"retrievals counted not_sampled: {result['not_sampled']}; {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
