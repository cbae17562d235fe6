"""`ctxprec demo` through the real command line, with its defaults (as `make demo` runs it): it
serves /metrics and /diagnostics while it runs; after the planted degradation the degraded
service's sample rate rises (in the view and in `ctxprec_sample_rate`) while the healthy one's
stays put, the drift alarm follows for that service only, the view says when the detector's
baseline has adapted to the new level (not a recovery), /diagnostics/documents names the planted
noisy documents and `ctxprec_recommended_k` is set; and it ends by itself with its summary."""
from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path

import aiohttp

import pytest

from ctxprec.collector.demo.corpus import NOISY_DOCUMENTS
from tests.collector.rag_app import scrape, value

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CTXPREC = Path(sys.executable).parent / "ctxprec"
DEFAULT_DURATION_S = 90.0


class Watcher:
    """Scrapes the demo's /metrics ten times a second (a boost lasts a few seconds) and reads
    /diagnostics/documents once the detector has had time to see the noisy documents."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.peak_rate: dict[str, float] = {}
        self.recommended_k: dict[tuple[str, str], float] = {}
        self.documents: dict | None = None

    async def run(self) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    async with session.get(f"{self.base}/metrics") as response:
                        samples = scrape(await response.text())
                except aiohttp.ClientError:  # the demo is shutting down
                    await asyncio.sleep(0.1)
                    continue
                for (name, labels), v in samples.items():
                    if name == "ctxprec_sample_rate":
                        service = dict(labels)["service"]
                        self.peak_rate[service] = max(self.peak_rate.get(service, 0.0), v)
                    elif name == "ctxprec_recommended_k" and v == v:  # not NaN
                        self.recommended_k[(dict(labels)["service"], dict(labels)["retriever"])] = v
                if self.documents is None and value(samples, "ctxprec_precision_drift", service="support-bot") == 1:
                    async with session.get(f"{self.base}/diagnostics/documents?limit=2") as response:
                        assert response.status == 200
                        self.documents = await response.json()
                await asyncio.sleep(0.1)


async def test_make_demo_runs_its_story_and_ends_by_itself() -> None:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        str(CTXPREC), "demo", "--metrics", "127.0.0.1:0", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    watcher_task: asyncio.Task[None] | None = None
    try:
        assert proc.stdout is not None
        first = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        url = re.search(r"metrics at (http://127\.0\.0\.1:\d+)/metrics", first)
        assert url, first
        assert "ends after 90s" in first and "10% sampled (adaptive)" in first
        watcher = Watcher(url.group(1))
        watcher_task = asyncio.create_task(watcher.run())
        lines = [first]
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            if not line:
                break
            lines.append(line)
        stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
        code = await asyncio.wait_for(proc.wait(), 30)
        elapsed = time.monotonic() - started
    finally:
        if watcher_task is not None:
            watcher_task.cancel()
            await asyncio.gather(watcher_task, return_exceptions=True)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out = "".join(lines)
    assert code == 0, out + stderr
    assert "Traceback" not in stderr, stderr
    # It ended by itself: no signal was sent, after the default duration.
    assert DEFAULT_DURATION_S <= elapsed < DEFAULT_DURATION_S + 30, elapsed

    def at(pattern: str) -> float:
        found = re.search(r"^\[\s*([\d.]+)s\] " + pattern, out, re.M)
        assert found, f"{pattern!r} not in:\n{out}"
        return float(found.group(1))

    degraded = at("support-bot: retriever degraded")
    rose = at(r"support-bot: sample rate 10% -> 50% \(drift suspected")
    drift = at(r"DRIFT detected for support-bot: recent precision [\d.]+ vs baseline [\d.]+")
    back = at(r"support-bot: sample rate back to 10% \(drift confirmed\)")
    adapted = at(r"support-bot: baseline adapted to 0\.[3-5]\d \(precision still 0\.[3-5]\d, was 0\.[7-9]\d "
                 r"before the drift\): a new normal, not a recovery")
    # The story in order, well within the run: drift detected within seconds of the degradation.
    assert degraded <= rose <= drift + 1.0 and drift < degraded + 15 and back >= rose
    assert drift < adapted < DEFAULT_DURATION_S
    assert "drift cleared" not in out  # the adaptation is never shown as a recovery
    assert re.search(r"^\[\s*[\d.]+s\]   support-bot .* drift adapted$", out, re.M), out
    # The healthy service: no alarm, no boost.
    assert "DRIFT detected for docs-search" not in out and "docs-search: sample rate" not in out
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
    assert "drift alarms: support-bot at" in summary and "support-bot: baseline adapted to" in summary
    for docs in NOISY_DOCUMENTS.values():
        assert all(d.id in summary for d in docs), summary
    assert "recommended top-k docs-search/docs-bm25: 3 of 6" in summary


async def test_demo_refuses_bad_flags() -> None:
    for flags, message in ((["--duration", "-3"], b"--duration: must be a number >= 0"),
                           (["--sample-rate", "0"], b"--sample-rate must be above 0"),
                           (["--metrics", "nowhere"], b"--metrics must be HOST:PORT")):
        proc = await asyncio.create_subprocess_exec(
            str(CTXPREC), "demo", *flags, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 2
        assert message in err and b"Traceback" not in err
