"""`serve(config)` in the test's own event loop, configured through the real flag parser."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import AsyncIterator

from ctxprec.collector import config as config_module
from ctxprec.collector.pipeline import Pipeline
from ctxprec.collector.serve import serve


def load_config(flags: list[str]):  # -> ServeConfig
    parser = argparse.ArgumentParser()
    config_module.add_arguments(parser)
    return config_module.load(parser.parse_args(flags), environ={})


def kafka_flags(bootstrap: str, topic: str, results_topic: str, judge_url: str, *, fmt: str,
                group: str, extra: list[str] | None = None) -> list[str]:
    return [
        "--kafka-bootstrap", bootstrap, "--kafka-topic", topic, "--kafka-format", fmt,
        "--kafka-group", group, "--kafka-results-topic", results_topic,
        "--judge-model", "openai/stub", "--judge-api-base", judge_url, "--judge-api-key", "test",
        "--otlp-grpc", "off", "--otlp-http", "off", "--metrics", "127.0.0.1:0",
        "--quiet-period", "0.2", *(extra or []),
    ]


@contextlib.asynccontextmanager
async def running(flags: list[str]) -> AsyncIterator[Pipeline]:
    """Start `serve`, yield its pipeline once ready, stop it gracefully on exit."""
    ready, stop = asyncio.Event(), asyncio.Event()
    started: list[Pipeline] = []
    task = asyncio.create_task(serve(load_config(flags), ready=ready, stop=stop, on_start=started.append))
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiter}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if not ready.is_set():
        waiter.cancel()
        if task.done():
            task.result()  # raises what made serve fail
        task.cancel()
        raise TimeoutError("serve did not become ready within 60 s")
    try:
        yield started[0]
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
