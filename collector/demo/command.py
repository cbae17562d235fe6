"""`ctxprec demo`: the sidecar in-process (local judge, every trace scored, short quiet period),
the synthetic RAG app sending it OTLP/HTTP, and a live view. Part-way through, one service's
retriever degrades and the drift detector raises its alarm within seconds."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from typing import Any, TextIO

from ctxprec.collector.demo.synthetic_app import AppConfig, EmittedTrace, SyntheticRagApp
from ctxprec.collector.demo.view import ServiceRow, Snapshot, Tally, render

log = logging.getLogger("ctxprec.demo")

DEFAULT_RATE = 30.0  # traces/s: enough for the detector to warm up within a few seconds
DEMO_SETTINGS: dict[str, Any] = {
    "receivers.otlp_grpc": "off",
    "receivers.otlp_http": "127.0.0.1:0",
    "judge.model": "local",
    "sampling.default_rate": 1.0,
    "assembly.quiet_period_s": 0.2,
    "assembly.max_wait_s": 5.0,
    "scoring.max_rss_mb": "off",
    "drift.warmup": 50,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help="seconds to run (default: until Ctrl-C)")
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, metavar="R",
                        help="traces per second (default %(default)s)")
    parser.add_argument("--degrade-after", type=float, default=None, metavar="S",
                        help="seconds before support-bot's retriever degrades (default: 40%% of --duration, else 20)")
    parser.add_argument("--metrics", default="127.0.0.1:9464", metavar="HOST:PORT",
                        help="HOST:PORT for /metrics (default %(default)s; a free port if taken)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic traffic (default %(default)s)")


def _check(args: argparse.Namespace) -> str | None:
    if args.duration is not None and not args.duration > 0:
        return f"--duration must be > 0 seconds, got {args.duration:g}"
    if not args.rate > 0:
        return f"--rate must be > 0 traces per second, got {args.rate:g}"
    if args.degrade_after is not None and args.degrade_after < 0:
        return f"--degrade-after must be >= 0 seconds, got {args.degrade_after:g}"
    host, sep, port = str(args.metrics).rpartition(":")
    if not sep or not port.isdigit():
        return f"--metrics must be HOST:PORT, got {args.metrics!r}"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem:
        print(f"ctxprec demo: {problem}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_main(args, sys.stdout))
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        return 130


def _config(metrics: str) -> Any:
    from ctxprec.collector import config as config_module

    return config_module.load(None, environ={}, file_values={**DEMO_SETTINGS, "metrics.listen": metrics})


async def _start_sidecar(metrics: str, tally: Tally) -> tuple[Any, asyncio.Task[None], asyncio.Event]:
    """Start `serve` in this loop; when the metrics port is taken, retry on a free port."""
    from ctxprec.collector.serve import serve

    for listen in (metrics, f"{metrics.rpartition(':')[0]}:0"):
        holder: dict[str, Any] = {}
        ready, stop = asyncio.Event(), asyncio.Event()

        def on_start(pipeline: Any) -> None:
            pipeline.add_sink(tally)
            holder["pipeline"] = pipeline

        task = asyncio.create_task(serve(_config(listen), ready=ready, stop=stop, on_start=on_start))
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            return holder["pipeline"], task, stop
        waiter.cancel()
        error = task.exception()
        if not isinstance(error, OSError) or listen.endswith(":0"):
            raise error if error else RuntimeError("the sidecar stopped before it was ready")
        log.info("metrics port %s is taken; using a free port", listen)
    raise RuntimeError("unreachable")


def _decisions(pipeline: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for family in pipeline.metrics.registry.collect():
        if family.name != "ctxprec_samples":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                decision = sample.labels["decision"]
                counts[decision] = counts.get(decision, 0) + int(sample.value)
    return counts


def _snapshot(app: SyntheticRagApp, pipeline: Any, tally: Tally, started: float, duration: float | None,
              events: list[str]) -> Snapshot:
    now = time.monotonic()
    rows = []
    for service in app.config.services:
        detector = pipeline.drift.detectors.get(service)
        t = tally.services.get(service)
        rows.append(ServiceRow(
            service=service, sent=app.stats.sent.get(service, 0), scored=t.scored if t else 0,
            failed=t.failed if t else 0, window=tally.window_mean(service, now),
            recent=detector.recent if detector and detector.count else None,
            baseline=detector.baseline if detector and detector.warmed_up else None,
            drift=bool(detector and detector.alarmed)))
    return Snapshot(elapsed=now - started, duration=duration, metrics_url=pipeline.metrics_url or "(off)",
                    degrade_service=app.config.degrade_service, degrade_after=app.config.degrade_after,
                    degraded_at=app.stats.degraded_at, rows=rows, decisions=_decisions(pipeline), events=events)


async def _main(args: argparse.Namespace, out: TextIO) -> int:
    tty = out.isatty()
    degrade_after = args.degrade_after
    if degrade_after is None:
        degrade_after = 0.4 * args.duration if args.duration else 20.0
    tally = Tally()
    pipeline, serve_task, serve_stop = await _start_sidecar(args.metrics, tally)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass

    def on_emit(trace: EmittedTrace) -> None:
        if trace.degraded:
            tally.degraded_traces.add(trace.trace_id)

    app = SyntheticRagApp(AppConfig(endpoint=f"http://127.0.0.1:{pipeline.otlp_http_port}", protocol="http",
                                    rate=args.rate, duration=args.duration, degrade_after=degrade_after,
                                    seed=args.seed, export_delay_ms=100), on_emit=on_emit)
    print(f"ctxprec demo: sidecar on OTLP/HTTP 127.0.0.1:{pipeline.otlp_http_port}, "
          f"metrics at {pipeline.metrics_url}/metrics; judge: local; "
          f"{app.config.degrade_service}'s retriever degrades after {degrade_after:g}s", file=out, flush=True)
    started = time.monotonic()
    app_task = asyncio.create_task(app.run(stop))
    events: list[str] = []
    alarmed: dict[str, bool] = {}
    drifts: list[tuple[str, float]] = []  # (service, seconds since start) of each alarm
    degraded_noted = False
    try:
        while not app_task.done():
            try:
                await asyncio.wait_for(asyncio.shield(app_task), 1.0)
            except asyncio.TimeoutError:
                pass
            snap = _snapshot(app, pipeline, tally, started, args.duration, events)
            if snap.degraded_at is not None and not degraded_noted:
                degraded_noted = True
                events.append(f"[{snap.degraded_at:5.1f}s] {snap.degrade_service}: retriever degraded "
                              "(relevant documents pushed down or replaced)")
                if not tty:
                    print(events[-1], file=out, flush=True)
            for row in snap.rows:
                if row.drift != alarmed.get(row.service, False):
                    alarmed[row.service] = row.drift
                    what = "DRIFT detected" if row.drift else "drift cleared"
                    if row.drift:
                        drifts.append((row.service, snap.elapsed))
                    events.append(f"[{snap.elapsed:5.1f}s] {what} for {row.service}: recent precision "
                                  f"{row.recent:.2f} vs baseline {row.baseline:.2f}")
                    if not tty:
                        print(events[-1], file=out, flush=True)
            print(render(snap, tty=tty), file=out, flush=True)
    finally:
        stop.set()
        await asyncio.gather(app_task, return_exceptions=True)
        app.shutdown()
        # Let the last traces reach their quiet period and be scored before stopping.
        await asyncio.sleep(0.5)
        serve_stop.set()
        await asyncio.gather(serve_task, return_exceptions=True)
    print(_summary(app, tally, drifts), file=out, flush=True)
    return 0


def _summary(app: SyntheticRagApp, tally: Tally, drifts: list[tuple[str, float]]) -> str:
    lines = ["", "summary (precision as scored by the sidecar's local judge):"]
    for service in app.config.services:
        before, after = tally.phase_mean(service, False), tally.phase_mean(service, True)
        t = tally.services.get(service)
        text = f"  {service:<12} scored {t.scored if t else 0:>5}; healthy retriever {before:.2f}" if before is not None \
            else f"  {service:<12} no scores"
        if after is not None:
            text += f", degraded retriever {after:.2f}"
        lines.append(text)
    lines.append("  drift alarms: " + ("; ".join(f"{service} at {at:.1f}s" for service, at in drifts) or "none"))
    return "\n".join(lines)
