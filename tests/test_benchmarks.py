"""The benchmarks keep running: a `--quick` pass of every one of them (figures not asserted, only
that each runs to its end and writes its report), so that none rots unseen between `make bench`
runs. The Phoenix sink's overhead needs a Phoenix server and is left to `make bench`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run_all import BENCHMARKS, result_name

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
NEEDS_PHOENIX = ("sink_overhead",)


@pytest.mark.timeout(900)
def test_every_benchmark_runs_quickly_and_reports() -> None:
    # Two at a time, on the machine's two cores: figures are not read here, only that each runs.
    proc = subprocess.run([sys.executable, "-m", "bench.run_all", "--quick", "--jobs", "2", "--skip", *NEEDS_PHOENIX],
                          cwd=ROOT, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = [name for name in BENCHMARKS if name not in NEEDS_PHOENIX]
    for name in ran:
        assert f"-m bench.{name} --quick" in proc.stdout
        report = json.loads((ROOT / "bench" / "results" / "quick" / f"{result_name(name)}.json").read_text())
        assert report, f"{name} wrote an empty report"
    assert "| benchmark | compared | ratio | goal | met |" in proc.stdout
