"""`ctxprec demo`: the sidecar in-process (local judge, 10% of traces sampled with adaptive
sampling, short quiet period), the synthetic RAG app sending it OTLP/HTTP, and a live view.
Part-way through, one service's retriever degrades: its sample rate rises while the drift is
suspected, the drift detector raises its alarm within seconds, and later its baseline adapts to
the new level. The planted noisy documents and the recommended top-k show as the diagnostics
find them. It ends by itself after `--duration` (90 s) with a summary."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from ctxprec.collector.config_types import parse_listen
from ctxprec.collector.demo.synthetic_app import AppConfig, EmittedTrace, SyntheticRagApp
from ctxprec.collector.demo.view import (
    ServiceRow,
    Snapshot,
    Tally,
    rate_text,
    render,
)
from ctxprec.scorer.batch import flag_type
from ctxprec.scorer.drift import Drift, DriftEnd
from ctxprec.scorer.values import parse_non_negative, parse_positive, parse_rate

log = logging.getLogger("ctxprec.demo")

# The timeline of the default run. At 120 traces/s (60 a service) and 10% sampling each service
# gets about 6 scores a second: the drift detector's warm-up (100 scores) ends after about 17 s,
# the retriever degrades at 25 s, the rate rises and the alarm follows within a few seconds, and
# the detector's baseline (moving fast here, see DEMO_SETTINGS) reaches the new level after
# about 40 s more, well before the run ends at 90 s.
DEFAULT_RATE = 120.0
DEFAULT_SAMPLE_RATE = 0.1
DEFAULT_DURATION = 90.0
DEFAULT_DEGRADE_AFTER = 25.0
DIAGNOSTICS_EVERY_S = 10.0  # the plain (non-terminal) view prints the diagnostics this often
DEMO_SETTINGS: dict[str, Any] = {
    "receivers.otlp_grpc": "off",
    "receivers.otlp_http": "127.0.0.1:0",
    "judge.model": "local",
    "assembly.quiet_period_s": 0.2,
    "assembly.max_wait_s": 5.0,
    "scoring.max_rss_mb": "off",
    "drift.warmup": 100,
    # A baseline that follows a lasting change within a minute at these rates (the default, 0.005,
    # takes several hundred scores): the demo shows the adaptation before it ends.
    "drift.baseline_alpha": 0.02,
    "sampling.adaptive": True,
    # Raised 5x (10% -> 50%) from 40% of the alarm threshold, and held for 50 scores of the alarm:
    # long enough to be seen in a view refreshed every second. A lower warning level would also
    # boost on the healthy service's noise now and then (cheap in production, confusing here).
    "sampling.adaptive_warning": 0.4,
    "sampling.adaptive_factor": 5.0,
    "sampling.adaptive_confirm_scores": 50,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=flag_type(parse_non_negative), default=DEFAULT_DURATION, metavar="S",
                        help="seconds to run, then print the summary and exit (default %(default)g; 0: until "
                             "Ctrl-C)")
    parser.add_argument("--rate", type=flag_type(parse_positive), default=DEFAULT_RATE, metavar="R",
                        help="traces per second (default %(default)g)")
    parser.add_argument("--sample-rate", type=flag_type(parse_rate), default=DEFAULT_SAMPLE_RATE, metavar="R",
                        help="fraction of traces scored, raised while a drift is suspected (default %(default)g)")
    parser.add_argument("--degrade-after", type=flag_type(parse_non_negative), default=DEFAULT_DEGRADE_AFTER,
                        metavar="S",
                        help="seconds before support-bot's retriever degrades (default %(default)g)")
    parser.add_argument("--metrics", default="127.0.0.1:9464", metavar="HOST:PORT",
                        help="HOST:PORT for /metrics (default %(default)s; a free port if taken)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic traffic (default %(default)s)")


def _check(args: argparse.Namespace) -> str | None:
    """What the flags' own parsers cannot say: the demo needs something sampled."""
    if args.sample_rate <= 0:
        return f"--sample-rate must be above 0 (the demo scores what it samples), got {args.sample_rate:g}"
    try:
        listen = parse_listen(args.metrics)
    except ValueError as exc:
        return f"--metrics {exc}"
    return None if listen is not None else "--metrics: the demo shows its metrics; give HOST:PORT"


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem:
        print(f"ctxprec demo: {problem}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_main(args, sys.stdout))
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        return 130


def _config(metrics: str, sample_rate: float) -> Any:
    from ctxprec.collector import config as config_module

    return config_module.load(None, environ={}, file_values={
        **DEMO_SETTINGS, "metrics.listen": metrics, "sampling.default_rate": sample_rate})


async def _start_sidecar(metrics: str, sample_rate: float,
                         tally: Tally) -> tuple[Any, asyncio.Task[None], asyncio.Event]:
    """Start `serve` in this loop; when the metrics port is taken, retry on a free port."""
    from ctxprec.collector.serve import serve

    for listen in (metrics, f"{metrics.rpartition(':')[0]}:0"):
        holder: dict[str, Any] = {}
        ready, stop = asyncio.Event(), asyncio.Event()

        def on_start(pipeline: Any) -> None:
            pipeline.add_sink(tally)
            holder["pipeline"] = pipeline

        task = asyncio.create_task(serve(_config(listen, sample_rate), ready=ready, stop=stop, on_start=on_start))
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


@dataclass(slots=True)
class Story:
    """What happened so far, as event lines for the view and facts for the summary."""

    tty: bool
    out: TextIO
    started: float
    events: list[str] = field(default_factory=list)
    drifts: list[tuple[str, float]] = field(default_factory=list)  # (service, seconds) of each alarm
    ended: list[tuple[str, float, DriftEnd]] = field(default_factory=list)  # (service, seconds, how)
    raised: dict[str, tuple[float, float]] = field(default_factory=dict)  # service -> (peak rate, seconds)
    adapted_now: set[str] = field(default_factory=set)

    def now(self) -> float:
        return time.monotonic() - self.started

    def add(self, text: str, at: float | None = None) -> None:
        self.events.append(f"[{self.now() if at is None else at:5.1f}s] {text}")
        if not self.tty:
            print(self.events[-1], file=self.out, flush=True)


def _watch_rates(pipeline: Any, story: Story, base: float) -> None:
    """Every change of a service's sample rate, as it happens (a boost lasts a few seconds)."""
    from ctxprec.collector.sampling.adaptive import Phase

    sampler = pipeline.sampler
    raising: set[str] = set()

    def changed(service: str, rate: float) -> None:
        if rate > base:
            raising.add(service)
            peak = story.raised.get(service, (0.0, story.now()))
            story.raised[service] = (max(peak[0], rate), peak[1])
            story.add(f"{service}: sample rate {rate_text(base)} -> {rate_text(rate)} (drift suspected: "
                      f"scoring more traces to confirm or dismiss it)")
        elif service in raising:  # not each service's first publication of its base rate
            raising.discard(service)
            confirmed = sampler.phase(service) is Phase.HOLD
            why = "drift confirmed" if confirmed else "nothing confirmed"
            story.add(f"{service}: sample rate back to {rate_text(rate)} ({why})")

    sampler.subscribe(changed)


def _diagnostics(pipeline: Any) -> list[str]:
    """The noisy documents and recommended top-k found so far (what /diagnostics/* serve)."""
    sink = pipeline.diagnostics
    if sink is None:
        return []
    lines = []
    for s in sink.documents_json({"limit": "2"}).body["summaries"]:
        docs = ", ".join(f"{d['document']} ({d['irrelevant']}x irrelevant)" for d in s["documents"])
        lines.append(f"noisy documents {s['service']}/{s['retriever']}: {docs}")
    for p in sink.top_k_json({}).body["pairs"]:
        if p["recommended_k"] is not None:
            lines.append(f"recommended top-k {p['service']}/{p['retriever']}: {p['recommended_k']} of "
                         f"{p['max_rank']} (saves {p['saved_tokens_per_request']:.0f} context tokens a request)")
    return lines


def _snapshot(app: SyntheticRagApp, pipeline: Any, tally: Tally, story: Story, duration: float | None,
              show_diagnostics: bool) -> Snapshot:
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
            drift=detector.drift if detector else None, rate=pipeline.sampler.rate(service),
            base_rate=pipeline.config.sampling.default_rate, adapted=service in story.adapted_now))
    return Snapshot(elapsed=now - story.started, duration=duration, metrics_url=pipeline.metrics_url or "(off)",
                    degrade_service=app.config.degrade_service, degrade_after=app.config.degrade_after,
                    degraded_at=app.stats.degraded_at, rows=rows, decisions=_decisions(pipeline),
                    events=story.events, diagnostics=_diagnostics(pipeline), show_diagnostics=show_diagnostics)


def _follow_drift(pipeline: Any, snap: Snapshot, story: Story, alarmed: dict[str, bool]) -> None:
    """Each alarm as it rises and ends, in the words the sidecar logs them in (the log lines
    themselves are kept out of the view: these are the same lines, with the view's time)."""
    for row in snap.rows:
        drifting = row.drift is not None
        if drifting == alarmed.get(row.service, False):
            continue
        alarmed[row.service] = drifting
        detector = pipeline.drift.detectors.get(row.service)
        if drifting:
            story.drifts.append((row.service, snap.elapsed))
            story.adapted_now.discard(row.service)
            explanation = pipeline.diagnostics.explainer.at_alarm(row.service) if pipeline.diagnostics else None
            words = explanation.message() if explanation is not None else row.drift.words(row.service)
            story.add(f"DRIFT: {words}", snap.elapsed)
            continue
        ended = detector.ended if detector is not None else None
        if ended is None:
            continue
        if ended.adapted:
            story.adapted_now.add(row.service)
        story.ended.append((row.service, snap.elapsed, ended))
        story.add(ended.words(row.service), snap.elapsed)


class _ToTheStory(logging.Handler):
    """The sidecar's warnings as event lines of the view (with its time), not as bare lines on
    stderr in the middle of it. The drift lines are left out: the view tells each drift itself,
    in the same words."""

    TOLD_BY_THE_VIEW = ("ctxprec.diagnostics.drift", "ctxprec.drift")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.story: Story | None = None
        self._early: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(self.TOLD_BY_THE_VIEW):
            return
        text = f"{record.levelname.lower()}: {record.getMessage()}"
        if self.story is None:
            self._early.append(text)
        else:
            self.story.add(text)

    def attach(self, story: Story) -> None:
        self.story = story
        for text in self._early:
            story.add(text)
        self._early.clear()


async def _main(args: argparse.Namespace, out: TextIO) -> int:
    tty = out.isatty()
    duration = args.duration or None  # 0: until Ctrl-C
    tally = Tally()
    to_the_story = _ToTheStory()
    root = logging.getLogger()
    root.addHandler(to_the_story)
    try:
        return await _run_demo(args, out, tty, duration, tally, to_the_story)
    finally:
        root.removeHandler(to_the_story)


async def _run_demo(args: argparse.Namespace, out: TextIO, tty: bool, duration: float | None, tally: Tally,
                    to_the_story: _ToTheStory) -> int:
    pipeline, serve_task, serve_stop = await _start_sidecar(args.metrics, args.sample_rate, tally)
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
                                    rate=args.rate, duration=duration, degrade_after=args.degrade_after,
                                    seed=args.seed, export_delay_ms=100), on_emit=on_emit)
    ends = f"ends after {duration:g}s" if duration else "runs until Ctrl-C"
    print(f"ctxprec demo: sidecar on OTLP/HTTP 127.0.0.1:{pipeline.otlp_http_port}, "
          f"metrics at {pipeline.metrics_url}/metrics (diagnostics at {pipeline.metrics_url}/diagnostics/documents); "
          f"judge: local; {args.rate:g} traces/s, {rate_text(args.sample_rate)} sampled (adaptive); "
          f"{app.config.degrade_service}'s retriever degrades after {args.degrade_after:g}s; {ends}",
          file=out, flush=True)
    story = Story(tty=tty, out=out, started=time.monotonic())
    to_the_story.attach(story)
    _watch_rates(pipeline, story, args.sample_rate)
    app_task = asyncio.create_task(app.run(stop))
    alarmed: dict[str, bool] = {}
    degraded_noted = False
    last_diagnostics = float("-inf")
    try:
        while not app_task.done():
            try:
                await asyncio.wait_for(asyncio.shield(app_task), 1.0)
            except asyncio.TimeoutError:
                pass
            show = story.now() - last_diagnostics >= DIAGNOSTICS_EVERY_S
            if show:
                last_diagnostics = story.now()
            snap = _snapshot(app, pipeline, tally, story, duration, show or tty)
            if snap.degraded_at is not None and not degraded_noted:
                degraded_noted = True
                story.add(f"{snap.degrade_service}: retriever degraded (relevant documents pushed down or "
                          "replaced)", snap.degraded_at)
            _follow_drift(pipeline, snap, story, alarmed)
            print(render(snap, tty=tty), file=out, flush=True)
    finally:
        stop.set()
        await asyncio.gather(app_task, return_exceptions=True)
        app.shutdown()
        # Let the last traces reach their quiet period and be scored before stopping.
        await asyncio.sleep(0.5)
        diagnostics = _diagnostics(pipeline)
        drifting = {service: detector.drift for service, detector in pipeline.drift.detectors.items()
                    if detector.drift is not None}
        serve_stop.set()
        await asyncio.gather(serve_task, return_exceptions=True)
    print(_summary(app, tally, story, diagnostics, args.sample_rate, drifting), file=out, flush=True)
    return 0


def _summary(app: SyntheticRagApp, tally: Tally, story: Story, diagnostics: list[str], base_rate: float,
             drifting: dict[str, Drift]) -> str:
    lines = ["", f"summary after {story.now():.0f}s (precision as scored by the sidecar's local judge):"]
    for service in app.config.services:
        before, after = tally.phase_mean(service, False), tally.phase_mean(service, True)
        t = tally.services.get(service)
        text = f"  {service:<12} scored {t.scored if t else 0:>5}; healthy retriever {before:.2f}" if before is not None \
            else f"  {service:<12} no scores"
        if after is not None:
            text += f", degraded retriever {after:.2f}"
        lines.append(text)
    rates = [f"{service} raised to {rate_text(peak)} at {at:.1f}s" for service, (peak, at) in story.raised.items()]
    steady = [s for s in app.config.services if s not in story.raised]
    if steady:
        rates.append(f"{', '.join(steady)} stayed at {rate_text(base_rate)}")
    lines.append("  sample rate: " + "; ".join(rates))
    lines.append("  drift alarms: " + ("; ".join(f"{service} at {at:.1f}s" for service, at in story.drifts) or "none"))
    for service, at, ended in story.ended:
        lines.append(f"  {ended.drift.words(service)}; at {at:.1f}s {ended.outcome()}")
    for service, drift in drifting.items():
        lines.append(f"  still alarmed at the end: {drift.words(service)}")
    lines += [f"  {line}" for line in diagnostics]
    return "\n".join(lines)
