"""A real Prometheus (Debian's /usr/bin/prometheus) for tests: temp dir, 127.0.0.1 free port,
1 s scrape and rule evaluation, and a copy of deploy/prometheus/rules with windows and `for`
durations shortened so that a run of a minute exercises them."""
from __future__ import annotations

import asyncio
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.helpers.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules"
PROMETHEUS = "/usr/bin/prometheus"

# Production window -> test window (1 s scrape interval: every window holds several samples).
SHORT_WINDOWS = {"5m": "10s", "10m": "20s", "1h": "30s", "7d": "10m"}
SHORT_FOR = "3s"


def shorten_rules(target_dir: Path) -> list[Path]:
    """Copies of the rule files with test windows; fails if a window has no test mapping."""
    written = []
    for source in sorted(RULES.glob("*.yml")):
        doc = yaml.safe_load(source.read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                expr = rule["expr"]
                for window in re.findall(r"\[(\w+)\]", expr):
                    if window not in SHORT_WINDOWS:
                        raise ValueError(f"{source.name}: no test window for [{window}] in {expr!r}")
                rule["expr"] = re.sub(r"\[(\w+)\]", lambda m: f"[{SHORT_WINDOWS[m.group(1)]}]", expr)
                if "for" in rule:
                    rule["for"] = SHORT_FOR
        path = target_dir / source.name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        written.append(path)
    return written


@dataclass
class Prometheus:
    workdir: Path
    scrape_target: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_config(self) -> Path:
        rules_dir = self.workdir / "rules"
        rules_dir.mkdir(parents=True, exist_ok=True)
        shorten_rules(rules_dir)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(rules_dir / "*.yml")],
            "scrape_configs": [{"job_name": "ctxprec", "static_configs": [{"targets": [self.scrape_target]}]}],
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        return path

    async def start(self) -> None:
        config = self.write_config()
        self._log = open(self.workdir / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h",
             "--enable-feature=exemplar-storage"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"prometheus exited: {self.log_tail()}")
                try:
                    async with session.get(f"{self.url}/-/ready") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
        raise RuntimeError(f"prometheus not ready within 30 s: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        if getattr(self, "_log", None) is not None:
            self._log.close()

    async def api(self, session: aiohttp.ClientSession, path: str, **params: Any) -> Any:
        async with session.get(f"{self.url}/api/v1/{path}", params=params) as r:
            body = await r.json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]
