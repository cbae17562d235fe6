"""`ctxprec demo` through the real command line, with its defaults (as `make demo` runs it): it
serves /metrics and /diagnostics while it runs; after the planted degradation the degraded
service's sample rate rises (in the view and in `ctxprec_sample_rate`) while the healthy one's
stays put, the drift alarm follows for that service only, the view says when the detector's
baseline has adapted to the new level (not a recovery), /diagnostics/documents names the planted
noisy documents and `ctxprec_recommended_k` is set; and it ends by itself with its summary.

One drift story: while the alarm is raised, the demo's view, /metrics, /diagnostics/drift and the
CtxprecPrecisionDrift alert as a real Prometheus (scraping the demo) evaluates it give the same
level before the drift (frozen), the same level after and the same drop."""
from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

import pytest

from ctxprec.collector.demo.corpus import NOISY_DOCUMENTS
from tests.collector.rag_app import scrape, value
from tests.deploy.live_prometheus import Prometheus
from tests.helpers.processes import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CTXPREC = Path(sys.executable).parent / "ctxprec"
DEFAULT_DURATION_S = 90.0
DRIFTING = "support-bot"
LEVELS = re.compile(r"precision drift in service '([\w-]+)': (\d\.\d\d) -> (\d\.\d\d) \((drop|rise) (\d\.\d\d)\)")


def printed_change(before: float, after: float) -> str:
    """The drop as every place prints it: between the two levels as printed."""
    return f"{abs(round(round(after, 2) - round(before, 2), 2)):.2f}"


@dataclass
class Seen:
    """What the watchers saw while the drift alarm was raised, each with the test's clock."""

    metrics: list[tuple[float, float, float]] = field(default_factory=list)  # (t, baseline, recent)
    diagnostics: list[tuple[float, float, float, dict[str, Any]]] = field(default_factory=list)  # + /drift's `now`
    alerts: list[tuple[float, str, str]] = field(default_factory=list)  # (t, state, summary)
    created_series: bool = False
    at_alarm: dict[str, Any] | None = None
    healthy: dict[str, Any] | None = None
    index: dict[str, Any] | None = None


class Watcher:
    """Scrapes the demo's /metrics ten times a second (a boost lasts a few seconds) and reads
    /diagnostics/documents once the detector has had time to see the noisy documents; while the
    drift alarm is raised, reads /diagnostics/drift right after each scrape."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.peak_rate: dict[str, float] = {}
        self.recommended_k: dict[tuple[str, str], float] = {}
        self.documents: dict | None = None
        self.seen = Seen()

    async def run(self) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    async with session.get(f"{self.base}/metrics") as response:
                        text = await response.text()
                    samples = scrape(text)
                    self.seen.created_series |= "_created" in text
                    for (name, labels), v in samples.items():
                        if name == "ctxprec_sample_rate":
                            service = dict(labels)["service"]
                            self.peak_rate[service] = max(self.peak_rate.get(service, 0.0), v)
                        elif name == "ctxprec_recommended_k" and v == v:  # not NaN
                            self.recommended_k[(dict(labels)["service"], dict(labels)["retriever"])] = v
                    if value(samples, "ctxprec_precision_drift", service=DRIFTING) == 1:
                        await self._while_alarmed(session, samples)
                except aiohttp.ClientError:  # the demo is shutting down
                    await asyncio.sleep(0.1)
                    continue
                await asyncio.sleep(0.1)

    async def _while_alarmed(self, session: aiohttp.ClientSession, samples: dict) -> None:
        now = time.monotonic()
        baseline = value(samples, "ctxprec_precision_baseline", service=DRIFTING)
        recent = value(samples, "ctxprec_precision_recent", service=DRIFTING)
        self.seen.metrics.append((now, baseline, recent))
        async with session.get(f"{self.base}/diagnostics/drift") as response:
            body = await response.json()
        by_service = {s["service"]: s for s in body["services"]}
        if by_service[DRIFTING]["alarmed"]:  # not the moment the alarm ended, between the two reads
            self.seen.diagnostics.append((now, baseline, recent, by_service[DRIFTING]["now"]))
        self.seen.at_alarm = by_service[DRIFTING]["at_alarm"]
        self.seen.healthy = by_service.get("docs-search")
        if self.documents is None:
            async with session.get(f"{self.base}/diagnostics/documents?limit=2") as response:
                assert response.status == 200
                self.documents = await response.json()
            async with session.get(f"{self.base}/diagnostics/") as response:
                self.seen.index = await response.json()


async def watch_alerts(prom: Prometheus, seen: Seen) -> None:
    """The drift alert as Prometheus evaluates the real rule (its `for` shortened) on its scrapes."""
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                alerts = (await prom.api(session, "alerts"))["alerts"]
            except (aiohttp.ClientError, AssertionError):
                alerts = []
            for alert in alerts:
                if alert["labels"].get("alertname") == "CtxprecPrecisionDrift":
                    seen.alerts.append((time.monotonic(), alert["state"], alert["annotations"]["summary"]))
            await asyncio.sleep(0.5)


async def test_make_demo_runs_its_story_and_ends_by_itself(tmp_path: Path) -> None:
    port = free_port()
    prom = Prometheus(tmp_path / "prometheus", scrape_target=f"127.0.0.1:{port}")
    await prom.start()
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        str(CTXPREC), "demo", "--metrics", f"127.0.0.1:{port}", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    tasks: list[asyncio.Task[None]] = []
    view: list[tuple[float, str]] = []  # (the test's clock, line)
    try:
        assert proc.stdout is not None
        first = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        url = re.search(r"metrics at (http://127\.0\.0\.1:\d+)/metrics", first)
        assert url, first
        assert url.group(1) == f"http://127.0.0.1:{port}", "Prometheus scrapes the port it was given"
        assert "ends after 90s" in first and "10% sampled (adaptive)" in first
        watcher = Watcher(url.group(1))
        tasks = [asyncio.create_task(watcher.run()), asyncio.create_task(watch_alerts(prom, watcher.seen))]
        lines = [first]
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            if not line:
                break
            lines.append(line)
            view.append((time.monotonic(), line))
        stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
        code = await asyncio.wait_for(proc.wait(), 30)
        elapsed = time.monotonic() - started
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        prom.stop()
    out = "".join(lines)
    assert code == 0, out + stderr
    assert "Traceback" not in stderr, stderr
    # The drift is told by the view, in the sidecar's words: no log line of it leaks beside the view.
    assert "precision drift" not in stderr, stderr
    # It ended by itself: no signal was sent, after the default duration.
    assert DEFAULT_DURATION_S <= elapsed < DEFAULT_DURATION_S + 30, elapsed

    def at(pattern: str) -> float:
        found = re.search(r"^\[\s*([\d.]+)s\] " + pattern, out, re.M)
        assert found, f"{pattern!r} not in:\n{out}"
        return float(found.group(1))

    degraded = at("support-bot: retriever degraded")
    rose = at(r"support-bot: sample rate 10% -> 50% \(drift suspected")
    drift = at(r"DRIFT: precision drift in service 'support-bot': \d\.\d\d -> \d\.\d\d \(drop \d\.\d\d\); "
               r"retriever kb-vector")
    back = at(r"support-bot: sample rate back to 10% \(drift confirmed\)")
    adapted = at(r"precision drift in service 'support-bot' ended: the baseline adapted to 0\.[3-5]\d \(it was "
                 r"0\.[7-9]\d before the drift\): a new normal, not a recovery")
    # The story in order, well within the run: drift detected within seconds of the degradation.
    assert degraded <= rose <= drift + 1.0 and drift < degraded + 15 and back >= rose
    assert drift < adapted < DEFAULT_DURATION_S
    assert "precision is back" not in out  # the adaptation is never shown as a recovery
    assert re.search(r"^\[\s*[\d.]+s\]   support-bot .* drift adapted$", out, re.M), out
    # The healthy service: no alarm, no boost.
    assert "service 'docs-search'" not in out and "docs-search: sample rate" not in out
    # The gauge rose for the degraded service only.
    assert watcher.peak_rate == {"support-bot": 0.5, "docs-search": 0.1}
    # The plain view refreshes every second and shows the rates.
    assert len(re.findall(r"^\[\s*[\d.]+s\] .*decisions: ", out, re.M)) >= 80
    assert re.search(r"^\[\s*[\d.]+s\]   docs-search .* rate  10% ", out, re.M)

    # Diagnostics while it ran: the planted noisy documents top each service's list, and the
    # retriever returning 6 contexts gets a recommended k of 3.
    assert watcher.documents is not None
    tops = {s["service"]: {d["document"] for d in s["documents"]} for s in watcher.documents["summaries"]}
    assert tops == {service: {d.id for d in docs} for service, docs in NOISY_DOCUMENTS.items()}, json.dumps(
        watcher.documents)[:2000]
    assert watcher.recommended_k.get(("docs-search", "docs-bm25")) == 3

    summary = out[out.index("summary after"):]
    found = re.search(r"support-bot\s+scored\s+(\d+); healthy retriever ([\d.]+), degraded retriever ([\d.]+)", summary)
    assert found, summary
    assert int(found.group(1)) >= 300
    assert float(found.group(2)) >= 0.8 and float(found.group(3)) <= 0.55
    assert re.search(r"docs-search\s+scored\s+\d+; healthy retriever 0\.[89]\d\n", summary), summary
    assert "sample rate: support-bot raised to 50% at" in summary and "docs-search stayed at 10%" in summary
    assert "drift alarms: support-bot at" in summary and "the baseline adapted to" in summary
    for docs in NOISY_DOCUMENTS.values():
        assert all(d.id in summary for d in docs), summary
    assert "recommended top-k docs-search/docs-bm25: 3 of 6" in summary

    check_one_drift_story(watcher.seen, view, out, summary)


def check_one_drift_story(seen: Seen, view: list[tuple[float, str]], out: str, summary: str) -> None:
    assert seen.metrics and seen.diagnostics, "the alarm was raised while the watcher scraped"
    # Before: the baseline is frozen at the level before the drift for as long as the alarm lasts,
    # and every place gives it.
    (before,) = {baseline for _, baseline, _ in seen.metrics}
    assert 0.8 <= before <= 1.0, before
    shown = f"{before:.2f}"
    rows = [(t, m) for t, line in view
            if (m := re.search(r"   support-bot .* recent (\d\.\d\d) baseline (\d\.\d\d) drift DRIFT "
                                r"\((drop|rise) (\d\.\d\d)\)$", line.rstrip("\n")))]
    assert len(rows) >= 20, "the view showed the drift every second while it lasted"
    assert {m.group(2) for _, m in rows} == {shown}
    assert {now["baseline_mean"] for _, _, _, now in seen.diagnostics} == {before}
    rose = LEVELS.search(out[out.index("DRIFT: "):])
    assert rose and rose.group(2) == shown
    assert seen.at_alarm is not None and seen.at_alarm["baseline_mean"] == before
    assert "DRIFT: " + seen.at_alarm["message"] in out  # the view's line is the explanation made at the alarm
    ended = LEVELS.search(summary)
    assert ended and ended.group(2) == shown

    # After and the drop: /diagnostics/drift read right after a scrape of /metrics gives the same
    # level since the drift (a score landing in between may move it by a hair), and its change is
    # the drop between the two printed levels.
    # In its first seconds the level since the drift rests on few scores, taken at the boosted rate,
    # and moves fast; after that it firms up.
    settled = seen.metrics[0][0] + 5.0
    same = 0
    for when, baseline, recent, now in seen.diagnostics:
        assert when < settled or abs(now["recent_mean"] - recent) <= 0.01
        same += now["recent_mean"] == recent
        assert now["alarmed"] is True and now["direction"] == "drop"
        assert f"{abs(now['change']):.2f}" == printed_change(now["baseline_mean"], now["recent_mean"])
        assert LEVELS.match(now["message"]).group(2, 3) == (shown, f"{now['recent_mean']:.2f}")
    assert same >= 0.8 * len(seen.diagnostics), (same, len(seen.diagnostics))
    after = seen.metrics[-1][2]
    assert 0.3 <= after <= 0.6, after  # the degraded retriever's level, as the summary's phase means say

    def recent_near(t: float) -> list[float]:
        return [r for when, _, r in seen.metrics if abs(when - t) <= 1.5]

    # The view's recent level and drop, against /metrics at the moment it was printed.
    for t, m in rows:
        assert m.group(4) == printed_change(before, float(m.group(1)))
        if t < settled:
            continue
        near = recent_near(t)
        assert near and min(abs(float(m.group(1)) - r) for r in near) <= 0.01, (m.group(0), near)

    # The alert rule, evaluated by Prometheus on its own scrapes: the same levels in the same words.
    firing = [(t, summary_) for t, state, summary_ in seen.alerts if LEVELS.match(summary_)]
    assert firing, seen.alerts[-5:]
    for t, text in firing:
        m = LEVELS.match(text)
        assert m.group(1) == DRIFTING and m.group(2) == shown and m.group(4) == "drop"
        assert m.group(5) == printed_change(before, float(m.group(3)))
        if t < settled:
            continue
        near = recent_near(t)
        assert near and min(abs(float(m.group(3)) - r) for r in near) <= 0.015, (text, near)
    assert any(state == "firing" for _, state, _ in seen.alerts)

    # "Drift" only when there is one; the index of /diagnostics/; no _created series.
    assert seen.healthy is not None
    healthy_now = seen.healthy["now"]
    assert healthy_now["alarmed"] is False and healthy_now["direction"] is None
    assert healthy_now["message"].startswith("no drift in service 'docs-search': precision ")
    assert seen.index is not None
    assert {e["path"] for e in seen.index["endpoints"]} >= {"/diagnostics/documents", "/diagnostics/drift",
                                                            "/diagnostics/top_k"}
    assert all(e["about"] for e in seen.index["endpoints"])
    assert not seen.created_series


async def test_demo_refuses_bad_flags() -> None:
    for flags, message in ((["--duration", "-3"], b"--duration: must be a number >= 0"),
                           (["--sample-rate", "0"], b"--sample-rate must be above 0"),
                           (["--metrics", "nowhere"], b"--metrics must be HOST:PORT")):
        proc = await asyncio.create_subprocess_exec(
            str(CTXPREC), "demo", *flags, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 2
        assert message in err and b"Traceback" not in err
