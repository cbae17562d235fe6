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
import random
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

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

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


Documents = Callable[[], list[tuple[Optional[str], str]]]  # (document id or None, content), in rank order


def rag_request(rng: random.Random, traces: int, *, resource: Mapping[str, str], documents: Documents,
                retriever: Callable[[], tuple[str, Mapping[str, str]]] = lambda: ("retrieve", {}),
                root_kind: str | None = None) -> bytes:
    """`traces` OpenInference RAG traces (root, retriever, LLM), ended now, in one OTLP request.
    `retriever()` gives the retriever span's name and extra attributes."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    def kv(key: str, value: str) -> KeyValue:
        return KeyValue(key=key, value=AnyValue(string_value=value))

    answer = "Open settings and reset the password."
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    for key, value in resource.items():
        rs.resource.attributes.append(kv(key, value))
    ss = rs.scope_spans.add()
    ss.scope.name = "bench"
    now = time.time_ns()
    for _ in range(traces):
        trace_id = rng.getrandbits(128).to_bytes(16, "big")
        root_id, ret_id, llm_id = (rng.getrandbits(64).to_bytes(8, "big") for _ in range(3))
        root = ss.spans.add(trace_id=trace_id, span_id=root_id, name="rag",
                            start_time_unix_nano=now - 50_000_000, end_time_unix_nano=now)
        if root_kind:
            root.attributes.append(kv("openinference.span.kind", root_kind))
        root.attributes.append(kv("output.value", answer))
        name, extra = retriever()
        ret = ss.spans.add(trace_id=trace_id, span_id=ret_id, parent_span_id=root_id, name=name,
                           start_time_unix_nano=now - 40_000_000, end_time_unix_nano=now - 30_000_000)
        ret.attributes.append(kv("openinference.span.kind", "RETRIEVER"))
        ret.attributes.append(kv("input.value", "How do I reset my password?"))
        for key, value in extra.items():
            ret.attributes.append(kv(key, value))
        for rank, (doc_id, content) in enumerate(documents()):
            if doc_id is not None:
                ret.attributes.append(kv(f"retrieval.documents.{rank}.document.id", doc_id))
            ret.attributes.append(kv(f"retrieval.documents.{rank}.document.content", content))
        llm = ss.spans.add(trace_id=trace_id, span_id=llm_id, parent_span_id=root_id, name="llm",
                           start_time_unix_nano=now - 25_000_000, end_time_unix_nano=now - 1_000_000)
        llm.attributes.append(kv("openinference.span.kind", "LLM"))
        llm.attributes.append(kv("output.value", answer))
    return request.SerializeToString()
