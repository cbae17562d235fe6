"""What every benchmark script shares: the machine description stored with each result, and
writing the result to bench/results/<name>.json (which bench.run_all renders)."""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    return {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def write_result(name: str, data: dict[str, Any], *, quick: bool = False) -> Path:
    """Writes bench/results/<name>.json and returns its path. A --quick run goes to
    bench/results/quick/ so that it never replaces the figures of a full run."""
    folder = RESULTS / "quick" if quick else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path
