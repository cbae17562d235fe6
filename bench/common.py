"""What the benchmark scripts share: the machine description stored with each result, writing
the result to bench/results/<name>.json (which bench.run_all renders), the code of a git ref as
a baseline measured in the same run, and, for those that run `ctxprec serve`, ports, readiness,
process CPU and OpenInference RAG requests."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from tests.helpers.processes import free_port


ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


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


# -- a baseline: the code of another git ref, in the same run ---------------------------------------

@contextlib.contextmanager
def baseline_code(ref: str) -> Iterator[tuple[str, Path]]:
    """The code of git ref `ref` (default use: `main`), checked out into a scratch worktree that
    is removed afterwards. Yields its commit and a folder to put first on PYTHONPATH, whose
    `ctxprec` package is that code (the repository maps ctxprec.scorer -> scorer/,
    ctxprec.collector -> collector/); a child process started with `env_for(folder)` runs it,
    in the same virtual environment and on the same inputs as this tree's code."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", ref], capture_output=True, text=True,
                            check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="ctxprec-bench-baseline-") as tmp:
        worktree = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(worktree), commit],
                       check=True)
        try:
            package = Path(tmp) / "path" / "ctxprec"
            package.mkdir(parents=True)
            for part in ("scorer", "collector"):
                (package / part).symlink_to(worktree / part)
            yield commit, Path(tmp) / "path"
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=False)


def env_for(pythonpath: Path | None) -> dict[str, str]:
    """The environment of a child that runs this tree's code (None) or a baseline's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPREC_") and k != "PYTHONPATH"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env


# -- what the benchmarks that run `ctxprec serve` share --------------------------------------------

def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout:g} s")


async def wait_http(url: str, timeout: float = 60.0) -> None:
    """Until `url` answers 200 (a sidecar's /readyz, Phoenix's UI)."""
    import aiohttp

    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def process_cpu_s(process: Any) -> float:
    """CPU seconds of a psutil process and its children."""
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


@contextlib.contextmanager
def serve_beside_stub_judge(forward_port: int, code: Path | None = None) -> Iterator[tuple[Any, int, int]]:
    """`ctxprec serve` as the throughput benchmarks run it (OTLP/HTTP in, span mode forwarding to
    `forward_port`, 1% of traces judged by `ctxprec stub-judge`), each in its own process, on this
    tree's code or a baseline's (`code`, from `baseline_code`). Yields the serve process, its
    OTLP/HTTP port and its metrics port, once both listen; stops both on exit."""
    judge_port, http_port, metrics_port = free_port(), free_port(), free_port()
    env = {**env_for(code), "OPENAI_API_KEY": "bench"}
    judge = subprocess.Popen([sys.executable, "-m", "ctxprec.collector.stub_judge", "--port", str(judge_port)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    serve = subprocess.Popen(
        [sys.executable, "-m", "ctxprec.collector.cli", "serve", "--otlp-grpc", "off",
         "--otlp-http", f"127.0.0.1:{http_port}", "--metrics", f"127.0.0.1:{metrics_port}",
         "--forward-to", f"http://127.0.0.1:{forward_port}", "--write-back", "span", "--sample-rate", "0.01",
         "--judge-model", "openai/stub", "--judge-api-base", f"http://127.0.0.1:{judge_port}/v1",
         "--quiet-period", "0.2", "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(judge_port)
        wait_port(metrics_port, timeout=30)
        yield serve, http_port, metrics_port
    finally:
        for proc in (serve, judge):
            proc.terminate()
        for proc in (serve, judge):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def prometheus_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


async def post_all(session: Any, url: str, bodies: list[bytes], concurrency: int = 4) -> None:
    """POSTs every OTLP protobuf body to `url` over an aiohttp session, `concurrency` at a time;
    an answer other than 200 fails the run."""
    queue = list(bodies)

    async def sender() -> None:
        while queue:
            async with session.post(url, data=queue.pop(), headers={"Content-Type": "application/x-protobuf"}) as answer:
                await answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"{url} answered {answer.status}")

    await asyncio.gather(*(sender() for _ in range(concurrency)))
