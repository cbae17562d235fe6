"""Drift detection from sampled traffic: how fast ctxprec's detector notices a precision drop at
flat sample rates and with adaptive sampling, what that costs in judge calls, how often it
cries wolf, whether the 95% bands hold the truth, and how river's ADWIN and PageHinkley do on the
same scores.

Simulated traffic, no network: one service at 200 retrievals a second. Each retrieval has a
random W3C trace id; its low 8 bytes go through the real sampling code (`Sampler` /
`AdaptiveSampler`: `keep_trace`, then `decide`), and its high 8 bytes pick its score, so every
configuration sees the same retrievals with the same scores and a higher rate's sample holds a
lower rate's. Scores are the MAP of 4 judged contexts, each relevant with a probability that
falls with its rank (many 1.0, a tail of 0, values in between); the mix's exact mean is 0.85
before the change and 0.60 after it. Sampled scores feed the real `DriftMonitor` (and, for the
adaptive configuration, the `AdaptiveSampler` hook on it) and river's detectors.

- 20 drift streams of 1 hour, each with a change at a random time between 10 and 50 minutes;
- 20 stable streams of 1 hour at 0.85.

Reported per configuration (flat 1%, 10%, 100%, adaptive from 1%):
- detection delay: seconds from the change to the detector's first alarm at or after it;
- judge calls: sampled retrievals over a whole stream (drift streams; stable streams apart);
- false alarms per stable stream-hour: alarms raised on the stable streams;
- band coverage: share of 5-minute windows whose 95% band, computed from the weighted sums as
  the recording rules compute it (collector/metrics/confidence.py), holds the generator's true
  mean over that window.

    .venv/bin/python -m bench.drift_detection [--quick]
"""
from __future__ import annotations

import argparse
import bisect
import random
import statistics
import time
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Callable, Protocol

from bench.common import machine, write_result
from ctxprec.collector.metrics.confidence import WeightedSums
from ctxprec.collector.metrics.drift import DriftMonitor
from ctxprec.collector.sampling.adaptive import AdaptiveSampler, AdaptiveSettings, Phase
from ctxprec.collector.sampling.sampler import Sampler
from ctxprec.scorer.precision import average_precision

SERVICE = "shop"
TRAFFIC_PER_S = 200
STREAM_S = 3600.0
WINDOW_S = 300.0
BEFORE, AFTER = 0.85, 0.60
CHANGE_BETWEEN_S = (600.0, 3000.0)
K = 4
# Relevance probability by rank, times a level solved for the target mean: a retriever's first
# hit is the likeliest, later ranks less so.
RANK_SHAPE = (1.0, 0.75, 0.55, 0.4)
HIGH = 2.0 ** 64


@dataclass(frozen=True, slots=True)
class ScoreMix:
    """The distribution of one retrieval's MAP: values and their cumulative probabilities."""

    values: tuple[float, ...]
    cumulative: tuple[float, ...]
    mean: float

    def score(self, u: float) -> float:
        return self.values[min(len(self.values) - 1, bisect.bisect_right(self.cumulative, u))]


def _mix_at(level: float) -> ScoreMix:
    probs: dict[float, float] = {}
    for pattern in product((False, True), repeat=K):
        p = 1.0
        for rank, relevant in enumerate(pattern):
            q = min(1.0, level * RANK_SHAPE[rank])
            p *= q if relevant else 1.0 - q
        ap = float(average_precision(pattern))
        probs[ap] = probs.get(ap, 0.0) + p
    values = tuple(sorted(probs))
    cumulative, total = [], 0.0
    for v in values:
        total += probs[v]
        cumulative.append(total)
    return ScoreMix(values, tuple(cumulative), sum(v * probs[v] for v in values))


def map_mix(target: float) -> ScoreMix:
    """The mix whose exact mean is `target` (bisection on the relevance level)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _mix_at(mid).mean < target:
            lo = mid
        else:
            hi = mid
    return _mix_at(hi)


MIX_BEFORE = map_mix(BEFORE)
MIX_AFTER = map_mix(AFTER)


@dataclass(frozen=True, slots=True)
class Stream:
    seed: int
    change_at: float | None  # None: stable

    def true_mean(self, start: float, end: float) -> float:
        if self.change_at is None or end <= self.change_at:
            return BEFORE
        if start >= self.change_at:
            return AFTER
        before = (self.change_at - start) / (end - start)
        return before * BEFORE + (1 - before) * AFTER


def streams(n: int) -> tuple[list[Stream], list[Stream]]:
    drift = []
    for seed in range(n):
        rng = random.Random(10_000 + seed)
        drift.append(Stream(seed, rng.uniform(*CHANGE_BETWEEN_S)))
    return drift, [Stream(1000 + seed, None) for seed in range(n)]


class RiverDetector(Protocol):
    drift_detected: bool

    def update(self, x: float) -> Any: ...


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    rate: float
    adaptive: bool = False


CONFIGS = [Config("flat_1pct", 0.01), Config("flat_10pct", 0.10), Config("flat_100pct", 1.0),
           Config("adaptive_from_1pct", 0.01, adaptive=True)]


@dataclass
class DetectorRun:
    """Alarm times of one detector on one stream."""

    alarms: list[float] = field(default_factory=list)


@dataclass
class StreamRun:
    judge_calls: int
    detectors: dict[str, DetectorRun]
    windows: list[tuple[WeightedSums, float]]  # (sums, true mean) per 5-minute window
    boosted_s: float = 0.0
    boosts: int = 0


def river_factories() -> dict[str, Callable[[], RiverDetector]]:
    """river's detectors with their default settings (the `bench` extra installs river)."""
    try:
        from river import drift
    except ImportError:
        return {}
    return {"river_adwin": lambda: drift.ADWIN(), "river_page_hinkley": lambda: drift.PageHinkley()}


def run_stream(stream: Stream, config: Config, *, with_river: bool, settings: AdaptiveSettings) -> StreamRun:
    pre, post = MIX_BEFORE, MIX_AFTER
    change = stream.change_at if stream.change_at is not None else float("inf")
    clock_now = [0.0]
    monitor = DriftMonitor(None)
    sampler: Sampler | AdaptiveSampler = Sampler(config.rate)
    adaptive: AdaptiveSampler | None = None
    if config.adaptive:
        # The wiring the sidecar will have: the monitor's hook drives the sampler's boosts.
        adaptive = AdaptiveSampler(Sampler(config.rate), settings, clock=lambda: clock_now[0])
        monitor.observers.append(adaptive.observe)
        sampler = adaptive
    keep, decide = sampler.keep_trace, sampler.decide
    rivers = {name: make() for name, make in river_factories().items()} if with_river else {}
    runs = {"ctxprec": DetectorRun(), **{name: DetectorRun() for name in rivers}}
    n_windows = int(STREAM_S // WINDOW_S)
    windows = [WeightedSums() for _ in range(n_windows)]
    rng = random.Random(stream.seed)
    getrandbits = rng.getrandbits
    dt = 1.0 / TRAFFIC_PER_S
    empty: dict[str, Any] = {}
    calls = 0
    alarmed = False
    ctx_alarms = runs["ctxprec"].alarms
    boosted_s, boosts, boosted_since = 0.0, 0, None
    for i in range(int(STREAM_S * TRAFFIC_PER_S)):
        tid = getrandbits(128)
        raw = tid.to_bytes(16, "big")
        if not keep(raw, SERVICE):
            continue
        t = i * dt
        clock_now[0] = t
        decision = decide(raw, SERVICE, empty)
        if not decision.sampled:
            continue
        calls += 1
        score = (pre if t < change else post).score((tid >> 64) / HIGH)
        now_alarmed = monitor.update(SERVICE, score)
        if now_alarmed and not alarmed:
            ctx_alarms.append(t)
        alarmed = now_alarmed
        windows[int(t // WINDOW_S)].add(score, decision.rate)
        for name, detector in rivers.items():
            detector.update(score)
            if detector.drift_detected:
                runs[name].alarms.append(t)
        if adaptive is not None:
            boosted = adaptive.phase(SERVICE) is Phase.BOOSTED
            if boosted and boosted_since is None:
                boosted_since, boosts = t, boosts + 1
            elif not boosted and boosted_since is not None:
                boosted_s += t - boosted_since
                boosted_since = None
    if boosted_since is not None:
        boosted_s += STREAM_S - boosted_since
    truths = [stream.true_mean(w * WINDOW_S, (w + 1) * WINDOW_S) for w in range(n_windows)]
    return StreamRun(calls, runs, list(zip(windows, truths)), boosted_s, boosts)


def _delay(stream: Stream, alarms: list[float]) -> float | None:
    assert stream.change_at is not None
    after = [a for a in alarms if a >= stream.change_at]
    return after[0] - stream.change_at if after else None


def _summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "mean": None, "p90": None, "max": None}
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered), 2), "mean": round(statistics.fmean(ordered), 2),
            "p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2), "max": round(ordered[-1], 2)}


def evaluate(config: Config, drift: list[Stream], stable: list[Stream], *, with_river: bool,
             settings: AdaptiveSettings) -> dict[str, dict[str, Any]]:
    """Figures per detector for one sampling configuration."""
    drift_runs = [run_stream(s, config, with_river=with_river, settings=settings) for s in drift]
    stable_runs = [run_stream(s, config, with_river=with_river, settings=settings) for s in stable]
    out: dict[str, dict[str, Any]] = {}
    held = total = 0
    for run in drift_runs + stable_runs:
        for sums, truth in run.windows:
            band = sums.band()
            if band is not None:
                total += 1
                held += band.holds(truth)
    for detector in drift_runs[0].detectors:
        delays = [_delay(s, r.detectors[detector].alarms) for s, r in zip(drift, drift_runs)]
        found = [d for d in delays if d is not None]
        early = sum(1 for s, r in zip(drift, drift_runs) for a in r.detectors[detector].alarms
                    if s.change_at is not None and a < s.change_at)
        false_alarms = sum(len(r.detectors[detector].alarms) for r in stable_runs)
        figures: dict[str, Any] = {
            "delay_s": _summary(found),
            "missed": len(delays) - len(found),
            "false_alarms_per_stable_stream_hour": round(false_alarms / (len(stable) * STREAM_S / 3600), 3),
            "alarms_before_the_change": early,
        }
        if detector == "ctxprec":
            figures.update({
                "judge_calls_per_drift_stream": round(statistics.fmean(r.judge_calls for r in drift_runs), 1),
                "judge_calls_per_stable_stream": round(statistics.fmean(r.judge_calls for r in stable_runs), 1),
                "band_coverage_5m": round(held / total, 4) if total else None,
                "band_windows": total,
            })
            if config.adaptive:
                figures["boosts_per_stable_stream_hour"] = round(
                    sum(r.boosts for r in stable_runs) / (len(stable) * STREAM_S / 3600), 2)
                figures["boosted_share_of_time_stable"] = round(
                    sum(r.boosted_s for r in stable_runs) / (len(stable) * STREAM_S), 4)
        out[detector] = figures
    return out



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 streams of each kind instead of 20")
    parser.add_argument("--only", nargs="*", help="run only these configurations")
    args = parser.parse_args(argv)
    n = 4 if args.quick else 20
    drift, stable = streams(n)
    settings = AdaptiveSettings()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    timings: dict[str, float] = {}
    for config in CONFIGS:
        if args.only and config.name not in args.only:
            continue
        started = time.monotonic()
        figures = evaluate(config, drift, stable, with_river=not config.adaptive, settings=settings)
        timings[config.name] = round(time.monotonic() - started, 1)
        for detector, values in figures.items():
            results.setdefault(detector, {})[config.name] = values
        print(f"{config.name}: {figures['ctxprec']}  ({timings[config.name]} s)", flush=True)
    if not river_factories():
        print("river is not installed (pip install -e '.[bench]'): ctxprec's detector only", flush=True)
    data = build_result(results, settings, n, timings)
    data["table"] = render_table(data).splitlines()
    path = write_result("drift_detection", data, quick=args.quick)
    print("\n".join(data["table"]))
    print(f"wrote {path}")
    return 0


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def build_result(results: dict[str, dict[str, dict[str, Any]]], settings: AdaptiveSettings, n: int,
                 timings: dict[str, float]) -> dict[str, Any]:
    ours = results.get("ctxprec", {})

    def get(config: str, *keys: str) -> Any:
        value: Any = ours.get(config)
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    adaptive_delay = get("adaptive_from_1pct", "delay_s", "mean")
    ratios = {
        "adaptive_delay_over_flat_1pct": _ratio(adaptive_delay, get("flat_1pct", "delay_s", "mean")),
        "adaptive_delay_over_flat_10pct": _ratio(adaptive_delay, get("flat_10pct", "delay_s", "mean")),
        "adaptive_calls_over_flat_1pct": _ratio(get("adaptive_from_1pct", "judge_calls_per_drift_stream"),
                                                get("flat_1pct", "judge_calls_per_drift_stream")),
    }
    coverages = [get(c.name, "band_coverage_5m") for c in CONFIGS]
    goals = {
        "delay_at_most_half_of_flat_1pct": ratios["adaptive_delay_over_flat_1pct"] is not None
        and ratios["adaptive_delay_over_flat_1pct"] <= 0.5,
        "delay_at_most_3x_flat_10pct": ratios["adaptive_delay_over_flat_10pct"] is not None
        and ratios["adaptive_delay_over_flat_10pct"] <= 3.0,
        "calls_at_most_1_2x_flat_1pct": ratios["adaptive_calls_over_flat_1pct"] is not None
        and ratios["adaptive_calls_over_flat_1pct"] <= 1.2,
        "false_alarms_no_more_than_flat_1pct": (get("adaptive_from_1pct", "false_alarms_per_stable_stream_hour") or 0)
        <= (get("flat_1pct", "false_alarms_per_stable_stream_hour") or 0),
        "band_coverage_93_to_97pct": all(c is not None and 0.93 <= c <= 0.97 for c in coverages),
    }
    return {
        "benchmark": "drift_detection",
        "description": ("Precision 0.85 -> 0.60 at a random time in simulated traffic (200 retrievals/s, MAP of 4 "
                        "contexts), scored through the real Sampler/AdaptiveSampler and DriftMonitor; river's ADWIN "
                        "and PageHinkley (defaults) on the same sampled scores. Delays are means over the drift "
                        "streams (medians beside them)."),
        "goal": ("adaptive from 1%: delay <= 0.5 x flat 1% and <= 3 x flat 10%, judge calls <= 1.2 x flat 1%, "
                 "false alarms <= flat 1%; band coverage 93-97% for every configuration"),
        "machine": machine(),
        "setup": {"streams_per_kind": n, "stream_s": STREAM_S, "traffic_per_s": TRAFFIC_PER_S,
                  "mean_before": BEFORE, "mean_after": AFTER, "window_s": WINDOW_S,
                  "adaptive": {"warning": settings.warning, "factor": settings.factor, "max_rate": settings.max_rate,
                               "confirm_scores": settings.confirm_scores, "max_boost_s": settings.max_boost_s}},
        "ratios": ratios,
        "goals": goals,
        "goal_met": all(goals.values()),
        "results": results,
        "seconds": timings,
    }


def render_table(data: dict[str, Any]) -> str:
    rows = ["| detector | sampling | delay s, mean (median) | missed | judge calls / drift stream | "
            "false alarms / stable h | 95% band coverage (5m) |", "|---|---|---|---|---|---|---|"]
    for detector, configs in data["results"].items():
        for config, f in configs.items():
            delay = f["delay_s"]
            rows.append(
                f"| {detector} | {config} | {delay['mean']} ({delay['median']}) | {f['missed']} | "
                f"{f.get('judge_calls_per_drift_stream', '')} | {f['false_alarms_per_stable_stream_hour']} | "
                f"{f.get('band_coverage_5m', '')} |")
    r = data["ratios"]
    rows += ["", f"Adaptive from 1%: delay {r['adaptive_delay_over_flat_1pct']} x flat 1% (goal <= 0.5), "
                 f"{r['adaptive_delay_over_flat_10pct']} x flat 10% (goal <= 3), judge calls "
                 f"{r['adaptive_calls_over_flat_1pct']} x flat 1% (goal <= 1.2). Goals met: "
                 + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in data["goals"].items()) + "."]
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
