"""Reading the sidecar's own /metrics over HTTP, the way Prometheus does."""
from __future__ import annotations

import time

import aiohttp

from tests.collector.rag_app import scrape

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape_metrics(metrics_url: str) -> Samples:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{metrics_url}/metrics") as response:
            assert response.status == 200, response.status
            return scrape(await response.text())


async def healthz_seconds(metrics_url: str, timeout_s: float = 2.0) -> float:
    """How long /healthz took on a new connection; it must answer 200 within `timeout_s`."""
    started = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        async with session.get(f"{metrics_url}/healthz") as response:
            assert response.status == 200
    return time.perf_counter() - started


async def healthy(metrics_url: str) -> bool:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{metrics_url}/healthz") as response:
            return response.status == 200


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of `name`'s samples whose labels include `labels`."""
    return sum(v for (n, got), v in samples.items()
               if n == name and all(dict(got).get(k) == want for k, want in labels.items()))
