"""`ctxprec demo --duration 20` through the real command line: it serves /metrics while it runs,
the injected retriever degradation shows as a drift alarm for that service only, and it ends by
itself with status 0."""
from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
CTXPREC = Path(sys.executable).parent / "ctxprec"


async def test_demo_runs_to_the_end_and_shows_the_drift() -> None:
    proc = await asyncio.create_subprocess_exec(
        str(CTXPREC), "demo", "--duration", "20", "--metrics", "127.0.0.1:0", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        url = re.search(r"metrics at (http://127\.0\.0\.1:\d+/metrics)", first)
        assert url, first
        lines = [first]
        scraped = ""
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            if not line:
                break
            lines.append(line)
            if not scraped and "decisions: evaluated=" in line:
                async with aiohttp.ClientSession() as session, session.get(url.group(1)) as response:
                    assert response.status == 200
                    scraped = await response.text()
        stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
        code = await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out = "".join(lines)
    assert code == 0, out + stderr
    assert "Traceback" not in stderr, stderr
    assert 'ctxprec_context_precision_count{retriever="kb-vector",service="support-bot"}' in scraped

    degraded = re.search(r"\[\s*([\d.]+)s\] support-bot: retriever degraded", out)
    drift = re.search(r"\[\s*([\d.]+)s\] DRIFT detected for support-bot: recent precision ([\d.]+) vs baseline ([\d.]+)", out)
    assert degraded and drift, out
    assert float(degraded.group(1)) <= float(drift.group(1)) < 20.0
    assert float(drift.group(2)) < float(drift.group(3))
    assert "DRIFT detected for docs-search" not in out
    # The plain (non-TTY) view refreshes every second.
    assert len(re.findall(r"^\[\s*[\d.]+s\] .*decisions: ", out, re.M)) >= 15

    summary = re.search(r"support-bot\s+scored\s+(\d+); healthy retriever ([\d.]+), degraded retriever ([\d.]+)", out)
    assert summary, out
    assert int(summary.group(1)) >= 200
    assert float(summary.group(2)) >= 0.8 and float(summary.group(3)) <= 0.55
    assert re.search(r"docs-search\s+scored\s+\d+; healthy retriever 0\.[89]\d\n", out), out
    assert "drift alarms: support-bot at" in out


async def test_demo_refuses_bad_flags() -> None:
    proc = await asyncio.create_subprocess_exec(
        str(CTXPREC), "demo", "--duration", "-3", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert b"--duration must be > 0" in err and b"Traceback" not in err
