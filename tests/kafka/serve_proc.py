"""`ctxprec serve` as a child process for the Kafka crash and scale-out tests: started with real
flags, watched through its own /readyz and /metrics, stopped with SIGTERM or killed with SIGKILL."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.processes import free_port

REPO = Path(__file__).resolve().parents[2]
CTXPREC = REPO / ".venv" / "bin" / "ctxprec"


def metric_total(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of metric `name` in Prometheus text whose labels include `labels` (0
    when there are none)."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


@dataclass
class ServeProcess:
    bootstrap: str
    topic: str
    results_topic: str
    judge_url: str
    log_path: Path
    group: str = "ctxprec-test"
    kafka_format: str = "rag_event"
    extra: list[str] = field(default_factory=list)
    metrics_port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def args(self) -> list[str]:
        return [
            str(CTXPREC), "serve",
            "--kafka-bootstrap", self.bootstrap, "--kafka-topic", self.topic,
            "--kafka-format", self.kafka_format, "--kafka-group", self.group,
            "--kafka-results-topic", self.results_topic,
            # A killed replica's partitions move on within a few seconds.
            "--kafka-session-timeout-ms", "3000", "--kafka-heartbeat-interval-ms", "500",
            "--kafka-commit-interval-s", "0.5",
            "--judge-model", "openai/stub", "--judge-api-base", self.judge_url, "--judge-api-key", "test",
            "--otlp-grpc", "off", "--otlp-http", "off",
            "--metrics", f"127.0.0.1:{self.metrics_port}", "--log-level", "info",
            *self.extra,
        ]

    def start(self) -> None:
        self.metrics_port = free_port()
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== start {time.strftime('%H:%M:%S')} ====\n".encode())
            self.proc = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"ctxprec serve exited early; log:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"ctxprec serve not healthy within {timeout_s}s; log:\n{self.log_tail()}")

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a metric's samples whose labels include `labels` (0 when absent)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as r:
            return metric_total(r.read().decode(), name, **labels)

    def kill(self) -> None:
        """SIGKILL (no cleanup); a no-op when it is not running."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise
        return self.proc.returncode

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"
