"""`ctxprec serve` under attack and through a downstream outage: /healthz latency during each
attack, peak RSS, and the spans an outage of the forward target costs.

One sidecar process per side, started as the probes found it: open-file limit 1024 (soft and
hard), span-mode forwarding to a discard endpoint in another process, the stub judge, steady load
of 1,500 spans/s over OTLP/HTTP (500 OpenInference RAG traces/s of 3 spans, 4 documents each,
10% sampled). Phases, one after the other, each figure beside the same process's quiet phase:

- `none`: the load alone (the baseline of the phases below);
- `slowloris`: 300 connections on OTLP/HTTP and 200 on the metrics port sending their headers
  a byte a second (reconnecting when closed, as an attacker would);
- `idle_flood`: 1,100 connections on OTLP/HTTP that send nothing (reconnecting too): more than
  the open-file limit holds;
- `max_request`: back-to-back requests of 100,000 tiny spans (`--max-spans-per-request`), each
  its own trace;
- `outage`: the forward target is down for `--outage-s` (60 s; 10 min with --outage-s 600): spans
  received, forwarded and dropped once it is back and the queue has drained;
- `huge_judge` (a second sidecar, its judge the stub judge answering 200 MB to every request,
  1% sampled): peak RSS against the sidecar's RSS at start, and how its samples were decided.

/healthz is probed every 100 ms from a thread of this process over a new connection (timeout
5 s; a failed probe counts as 5 s). RSS is the sidecar's, sampled every 50 ms (psutil). The same
phases run against the code of `--baseline-ref` (default `main`) in the same run, unless
`--quick` (this tree only, short phases: well under a minute) or `--no-baseline`.

`--soak-s 900` instead runs the load alone for that long against this tree and writes
bench/results/soak.json: spans sent, received and forwarded, retrievals decided, RSS at the start
and the end, /healthz p99 and max.

    .venv/bin/python -m bench.attacks [--quick] [--outage-s 60] [--baseline-ref main | --no-baseline]
    .venv/bin/python -m bench.attacks --soak-s 900
    .venv/bin/python -m bench.attacks --outage-only --outage-s 600
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import psutil

from bench.common import baseline_code, env_for, machine, wait_http, wait_port, write_result
from bench.ingest import _discard_server
from tests.helpers.processes import free_port
from tests.helpers.rag_traces import rag_request

FILE_LIMIT = 1024
TRACES_PER_REQUEST = 50  # of 3 spans: 150 spans a request, 10 requests a second
REQUESTS_PER_S = 10
SPANS_PER_TRACE = 3
MAX_REQUEST_SPANS = 100_000
IDLE_FLOOD = 1_100
HUGE_ANSWER_MB = 200
PROBE_TIMEOUT_S = 5.0
DOCUMENTS = [("kb-1", "To reset a password open Settings, choose Security and click Reset Password."),
             ("kb-2", "Password reset links expire after 30 minutes."),
             ("kb-3", "Our offices are closed on public holidays."),
             ("kb-4", "Invoices are sent on the first day of each month.")]


# -- the servers around the sidecar ----------------------------------------------------------------

def _low_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


@dataclass
class Sidecar:
    proc: subprocess.Popen[bytes]
    http_port: int
    metrics_port: int
    log: Path

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"{self.metrics_url}/metrics", timeout=10) as response:
            text = response.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def total(self, name: str, **labels: str) -> float:
        return sum(v for (n, got), v in self.metrics().items()
                   if n == name and all(dict(got).get(k) == want for k, want in labels.items()))


@contextlib.asynccontextmanager
async def sidecar(code: Path | None, judge_url: str, forward_port: int, folder: Path, *extra: str
                  ) -> AsyncIterator[Sidecar]:
    http_port, metrics_port = free_port(), free_port()
    log = folder / f"serve-{http_port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxprec.collector.cli", "serve", "--otlp-grpc", "off",
             "--otlp-http", f"127.0.0.1:{http_port}", "--metrics", f"127.0.0.1:{metrics_port}",
             "--forward-to", f"http://127.0.0.1:{forward_port}", "--write-back", "span",
             "--judge-model", "openai/stub", "--judge-api-base", judge_url, "--judge-api-key", "bench",
             "--judge-concurrency", "2", "--sample-rate", "0.1", "--quiet-period", "0.5", *extra],
            env=env_for(code), stdout=out, stderr=subprocess.STDOUT, preexec_fn=_low_file_limit)
    try:
        await wait_http(f"http://127.0.0.1:{metrics_port}/healthz", timeout=60)
        yield Sidecar(proc, http_port, metrics_port, log)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


class ForwardTarget:
    """The discard OTLP endpoint spans are forwarded to, in its own process, that can be taken
    down and brought back on the same port."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: multiprocessing.Process | None = None

    def start(self) -> None:
        self.proc = multiprocessing.get_context("spawn").Process(target=_discard_server, args=(self.port,),
                                                                 daemon=True)
        self.proc.start()
        wait_port(self.port, timeout=30)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.join(5)
            self.proc = None


# -- load, probes and memory -----------------------------------------------------------------------

class Load:
    """1,500 spans/s of RAG traces over OTLP/HTTP: a template request whose trace ids are replaced
    by new ones for every request (bytes.replace, so the load costs this process little)."""

    def __init__(self, port: int, seed: int = 5) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.url = f"http://127.0.0.1:{port}/v1/traces"
        self.rng = random.Random(seed)
        self.template = rag_request(self.rng, TRACES_PER_REQUEST, resource={"service.name": "support-bot"},
                                    documents=lambda: list(DOCUMENTS))
        request = ExportTraceServiceRequest.FromString(self.template)
        self.trace_ids = sorted({s.trace_id for s in request.resource_spans[0].scope_spans[0].spans})
        self.sent_spans = 0
        self.failed_requests = 0

    def body(self) -> bytes:
        out = self.template
        for old in self.trace_ids:
            out = out.replace(old, self.rng.randbytes(16))
        return out

    async def run(self, stop: asyncio.Event) -> None:
        import aiohttp

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            next_at = time.monotonic()
            while not stop.is_set():
                try:
                    async with session.post(self.url, data=self.body(),
                                            headers={"Content-Type": "application/x-protobuf"}) as response:
                        await response.read()
                        if response.status == 200:
                            self.sent_spans += TRACES_PER_REQUEST * SPANS_PER_TRACE
                        else:
                            self.failed_requests += 1
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    self.failed_requests += 1
                next_at += 1 / REQUESTS_PER_S
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))


@dataclass
class Watch:
    """/healthz latencies and the sidecar's RSS, from threads (this process's event loop runs the
    attacks and the load; the probe must not wait for it)."""

    url: str
    pid: int
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    rss: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> "Watch":
        self._threads = [threading.Thread(target=self._probe, daemon=True),
                         threading.Thread(target=self._memory, daemon=True)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(PROBE_TIMEOUT_S + 1)

    def _probe(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=PROBE_TIMEOUT_S) as response:
                    ok = response.status == 200
            except OSError:
                ok = False
            took = time.perf_counter() - started
            if not ok:
                self.failures += 1
                took = max(took, PROBE_TIMEOUT_S)
            self.latencies.append(took)
            self._stop.wait(0.1)

    def _memory(self) -> None:
        proc = psutil.Process(self.pid)
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.rss.append(proc.memory_info().rss)
            self._stop.wait(0.05)

    def figures(self) -> dict[str, Any]:
        ordered = sorted(self.latencies) or [0.0]
        return {"healthz_p50_ms": round(statistics.median(ordered) * 1000, 1),
                "healthz_p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1),
                "healthz_max_ms": round(ordered[-1] * 1000, 1), "healthz_probes": len(self.latencies),
                "healthz_failed": self.failures,
                "peak_rss_mb": round(max(self.rss or [0]) / 2**20, 1)}


# -- the attacks -----------------------------------------------------------------------------------

async def hold(port: int, count: int, stop: asyncio.Event, drip: bytes | None) -> dict[str, int]:
    """`count` connections to `port` kept up until `stop`, each reconnecting when the server closes
    it (after a pause of 0.1 s); `drip` sends request headers a byte a second (slowloris), None
    sends nothing."""
    stats = {"connections": 0, "closed_by_server": 0}

    async def one() -> None:
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            stats["connections"] += 1
            try:
                if drip is not None:
                    writer.write(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                while not stop.is_set():
                    try:
                        data = await asyncio.wait_for(reader.read(1024), 1.0)
                    except asyncio.TimeoutError:
                        if drip is not None:
                            writer.write(drip)
                        continue
                    if not data:
                        stats["closed_by_server"] += 1
                        break
            except OSError:
                stats["closed_by_server"] += 1
            finally:
                writer.transport.abort()
            await asyncio.sleep(0.1)

    await asyncio.gather(*(one() for _ in range(count)))
    return stats


def tiny_request(spans: int) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    repeated = request.resource_spans.add().scope_spans.add().spans
    rng = random.Random(3)
    for _ in range(spans):
        repeated.add(trace_id=rng.randbytes(16), span_id=rng.randbytes(8), name="s")
    return request.SerializeToString()


async def big_requests(port: int, body: bytes, stop: asyncio.Event) -> dict[str, Any]:
    import aiohttp

    statuses: list[int] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        while not stop.is_set():
            try:
                async with session.post(f"http://127.0.0.1:{port}/v1/traces", data=body,
                                        headers={"Content-Type": "application/x-protobuf"}) as response:
                    await response.read()
                    statuses.append(response.status)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                statuses.append(0)
    return {"requests": len(statuses), "answered_200": statuses.count(200)}


async def phase(car: Sidecar, load: Load, seconds: float, attack: Callable[[asyncio.Event], Any] | None
                ) -> dict[str, Any]:
    log_before, failed_before = car.log.stat().st_size, load.failed_requests
    stop = asyncio.Event()
    with Watch(car.metrics_url, car.proc.pid) as watch:
        task = asyncio.ensure_future(attack(stop)) if attack is not None else None
        await asyncio.sleep(seconds)
        stop.set()
        outcome = await task if task is not None else None
    figures = watch.figures()
    figures["log_bytes"] = car.log.stat().st_size - log_before
    figures["load_requests_failed"] = load.failed_requests - failed_before
    if isinstance(outcome, dict):
        figures.update(outcome)
    await asyncio.sleep(1.0)  # closed connections and the last big request settle before the next phase
    return figures


async def outage(car: Sidecar, target: ForwardTarget, down_s: float) -> dict[str, Any]:
    """Takes the forward target down for `down_s` under the load, brings it back, and waits until
    every span received is forwarded or dropped (or nothing moved for 10 s)."""
    def counts() -> dict[str, float]:
        return {"received": car.total("ctxprec_spans_received_total"),
                "forwarded": car.total("ctxprec_exported_spans_total", exporter="span_forwarder", outcome="ok"),
                "dropped": car.total("ctxprec_export_dropped_total", exporter="span_forwarder")}

    await asyncio.sleep(2.0)
    before = counts()
    with Watch(car.metrics_url, car.proc.pid) as watch:
        target.stop()
        await asyncio.sleep(down_s)
        target.start()
        after, unchanged = counts(), 0
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            now = counts()
            unchanged = unchanged + 1 if now == after else 0
            after = now
            moved = (now["forwarded"] - before["forwarded"]) + (now["dropped"] - before["dropped"])
            if moved >= now["received"] - before["received"] or unchanged >= 10:
                break
    received = after["received"] - before["received"]
    dropped = after["dropped"] - before["dropped"]
    reasons = {dict(labels)["reason"]: v for (name, labels), v in car.metrics().items()
               if name == "ctxprec_export_dropped_total" and dict(labels).get("exporter") == "span_forwarder" and v}
    return {"outage_s": down_s, "spans_received": int(received),
            "spans_forwarded": int(after["forwarded"] - before["forwarded"]), "spans_dropped": int(dropped),
            "lost_fraction": round(dropped / received, 4) if received else 0.0,
            "dropped_by_reason": reasons, **watch.figures()}


def stub_judge(port: int, *flags: str) -> subprocess.Popen[bytes]:
    """`ctxprec stub-judge` of this tree (the judge is not what is measured), ready."""
    judge = subprocess.Popen([sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", str(port), *flags],
                             env=env_for(None), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, timeout=30)
    return judge


async def side(code: Path | None, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Every phase against one side's code."""
    seconds = 3.0 if args.quick else 20.0
    judge_port, huge_port = free_port(), free_port()
    judge = stub_judge(judge_port)
    huge = stub_judge(huge_port, "--huge-answer-mb", str(HUGE_ANSWER_MB))
    target = ForwardTarget(free_port())
    results: dict[str, Any] = {}
    try:
        target.start()
        async with sidecar(code, f"http://127.0.0.1:{judge_port}/v1", target.port, folder) as car:
            load = Load(car.http_port)
            stop_load = asyncio.Event()
            loader = asyncio.ensure_future(load.run(stop_load))
            await asyncio.sleep(2.0)
            results["none"] = await phase(car, load, seconds, None)
            results["slowloris"] = await phase(car, load, seconds, lambda stop: _gather_dicts(
                hold(car.http_port, 300, stop, b"a"), hold(car.metrics_port, 200, stop, b"a")))
            results["idle_flood"] = await phase(car, load, seconds,
                                                lambda stop: hold(car.http_port, IDLE_FLOOD, stop, None))
            body = tiny_request(MAX_REQUEST_SPANS)
            results["max_request"] = await phase(car, load, seconds,
                                                 lambda stop: big_requests(car.http_port, body, stop))
            results["outage"] = await outage(car, target, 5.0 if args.quick else args.outage_s)
            stop_load.set()
            await loader
            results["load"] = {"spans_sent": load.sent_spans, "failed_requests": load.failed_requests}
        async with sidecar(code, f"http://127.0.0.1:{huge_port}/v1", target.port, folder,
                           "--sample-rate", "0.01") as car:
            started_rss = psutil.Process(car.proc.pid).memory_info().rss
            load = Load(car.http_port, seed=9)
            stop_load = asyncio.Event()
            loader = asyncio.ensure_future(load.run(stop_load))
            # Every sampled retrieval (5 a second) meets the 200 MB answer.
            attacked = await phase(car, load, seconds * 2, None)
            stop_load.set()
            await loader
            m = car.metrics()
            decided = {dict(labels).get("decision"): v for (name, labels), v in m.items()
                       if name == "ctxprec_samples_total" and v}
            outcomes = {dict(labels).get("outcome"): v for (name, labels), v in m.items()
                        if name == "ctxprec_judge_requests_total" and v}
            results["huge_judge"] = {**attacked, "start_rss_mb": round(started_rss / 2**20, 1),
                                     "decisions": decided, "judge_requests": outcomes}
    finally:
        for proc in (judge, huge):
            proc.terminate()
            proc.wait(10)
        target.stop()
    return results


@contextlib.asynccontextmanager
async def under_load(folder: Path, seed: int
                     ) -> AsyncIterator[tuple[Sidecar, ForwardTarget, Load, Callable[[], Awaitable[None]]]]:
    """This tree's sidecar with the stub judge and a forward target, under the load until the
    block ends or the yielded `stop_load()` is awaited; everything is stopped after."""
    judge_port = free_port()
    judge = stub_judge(judge_port)
    target = ForwardTarget(free_port())
    try:
        target.start()
        async with sidecar(None, f"http://127.0.0.1:{judge_port}/v1", target.port, folder) as car:
            load = Load(car.http_port, seed=seed)
            stop = asyncio.Event()
            loader = asyncio.ensure_future(load.run(stop))

            async def stop_load() -> None:
                stop.set()
                await loader

            try:
                yield car, target, load, stop_load
            finally:
                await stop_load()
    finally:
        judge.terminate()
        judge.wait(10)
        target.stop()


async def outage_only(down_s: float, folder: Path) -> dict[str, Any]:
    """One outage of `down_s` under the load, this tree only (a 10-minute one takes its time)."""
    async with under_load(folder, seed=17) as (car, target, _, _):
        return await outage(car, target, down_s)


async def _gather_dicts(*coros: Any) -> dict[str, int]:
    merged: dict[str, int] = {}
    for result in await asyncio.gather(*coros):
        for key, value in result.items():
            merged[key] = merged.get(key, 0) + value
    return merged


async def soak(seconds: float, folder: Path) -> dict[str, Any]:
    async with under_load(folder, seed=13) as (car, _, load, stop_load):
        await asyncio.sleep(5.0)
        rss_start = psutil.Process(car.proc.pid).memory_info().rss
        with Watch(car.metrics_url, car.proc.pid) as watch:
            await asyncio.sleep(seconds)
            await stop_load()
            await asyncio.sleep(10.0)  # the last traces are decided and forwarded
        return {"seconds": seconds, "spans_sent": load.sent_spans, "failed_requests": load.failed_requests,
                "spans_received": int(car.total("ctxprec_spans_received_total")),
                "spans_forwarded": int(car.total("ctxprec_exported_spans_total", exporter="span_forwarder",
                                                 outcome="ok")),
                "spans_dropped": int(car.total("ctxprec_export_dropped_total")),
                "retrievals_decided": int(car.total("ctxprec_samples_total")),
                "rss_start_mb": round(rss_start / 2**20, 1),
                "rss_end_mb": round(psutil.Process(car.proc.pid).memory_info().rss / 2**20, 1), **watch.figures()}


def table(results: dict[str, dict[str, Any]], baseline: str | None) -> list[str]:
    """attack | figure | this tree | the baseline ref, in markdown."""
    ours, theirs = results["ctxprec"], results.get("baseline")
    rows = ["| attack | figure | this tree |" + (f" {baseline} |" if theirs else ""),
            "|---|---|---|" + ("---|" if theirs else "")]

    def row(attack: str, figure: str, key: str) -> None:
        cells = [attack, figure] + [str(side.get(attack, {}).get(key, "")) for side in (ours, theirs) if side]
        rows.append("| " + " | ".join(cells) + " |")

    for attack in ("none", "slowloris", "idle_flood", "max_request", "huge_judge", "outage"):
        row(attack, "/healthz p99 ms", "healthz_p99_ms")
        row(attack, "/healthz max ms", "healthz_max_ms")
        row(attack, "/healthz probes failed", "healthz_failed")
        row(attack, "peak RSS MiB", "peak_rss_mb")
    row("huge_judge", "RSS at start MiB", "start_rss_mb")
    for attack in ("slowloris", "idle_flood", "max_request"):
        row(attack, "load requests failed", "load_requests_failed")
    row("idle_flood", "log bytes written", "log_bytes")
    row("outage", "seconds down", "outage_s")
    row("outage", "spans received", "spans_received")
    row("outage", "spans dropped", "spans_dropped")
    row("outage", "lost fraction", "lost_fraction")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="this tree only, 3 s phases, a 5 s outage")
    parser.add_argument("--outage-s", type=float, default=60.0, help="the forward target's outage (default 60)")
    parser.add_argument("--baseline-ref", default="main", help="git ref whose code is the baseline (default main)")
    parser.add_argument("--no-baseline", action="store_true", help="measure this tree only")
    parser.add_argument("--soak-s", type=float, default=None, help="run the load alone this long instead")
    parser.add_argument("--outage-only", action="store_true",
                        help="only one outage of --outage-s, this tree (bench/results/outage_<seconds>s.json)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctxprec-bench-attacks-") as tmp:
        folder = Path(tmp)
        if args.soak_s:
            figures = asyncio.run(soak(args.soak_s, folder))
            print(figures)
            write_result("soak", {"benchmark": "soak", "description": (
                "`ctxprec serve` under 1,500 spans/s of RAG traces (10% sampled, stub judge, span-mode forwarding "
                "to a discard endpoint) for the whole run: nothing lost, memory flat, /healthz answering"),
                "machine": machine(), **figures})
            return
        if args.outage_only:
            figures = asyncio.run(outage_only(args.outage_s, folder))
            print(figures)
            write_result(f"outage_{args.outage_s:g}s", {"benchmark": "outage", "description": (
                "spans an outage of the forward target costs `ctxprec serve` under 1,500 spans/s (span-mode "
                "forwarding, the default 64 MB queue and 300 s deadline)"), "machine": machine(), **figures})
            return
        results = {"ctxprec": asyncio.run(side(None, args, folder))}
        commit = None
        if not (args.quick or args.no_baseline):
            with baseline_code(args.baseline_ref) as (commit, code):
                results["baseline"] = asyncio.run(side(code, args, folder))
    lines = table(results, args.baseline_ref if "baseline" in results else None)
    print("\n".join(lines))
    ours = results["ctxprec"]
    out = {
        "benchmark": "attacks",
        "description": ("`ctxprec serve` (open-file limit 1024, 1,500 spans/s of load) under each attack, one "
                        "after the other, and through an outage of its forward target; each phase beside the "
                        "same process's quiet phase and, in a full run, beside the baseline ref's code"),
        "quick": args.quick, "machine": machine(),
        **({"baseline_ref": args.baseline_ref, "baseline_commit": commit} if commit else {}),
        "table": lines,
        "healthz_p99_ms_worst_attack": max(ours[a]["healthz_p99_ms"] for a in
                                           ("slowloris", "idle_flood", "max_request", "huge_judge")),
        "outage_lost_fraction": ours["outage"]["lost_fraction"],
        "huge_judge_rss_over_start": round(ours["huge_judge"]["peak_rss_mb"] / ours["huge_judge"]["start_rss_mb"], 3),
        "goal_met": (max(ours[a]["healthz_failed"] for a in ("slowloris", "idle_flood", "max_request", "huge_judge"))
                     == 0 and ours["huge_judge"]["peak_rss_mb"] < 2 * ours["huge_judge"]["start_rss_mb"]
                     and ours["outage"]["lost_fraction"] == 0),
        "results": results,
    }
    write_result("attacks", out, quick=args.quick)


if __name__ == "__main__":
    main()
