"""Scenario: the Kafka broker unreachable for 15 s (a proxy in front of the real Tansu broker
taken down, then back on the same port). aiokafka logs an ERROR per reconnection attempt (2,108
lines in 15 s before, about 69 MB of log an hour of outage); the sidecar's log folds a library's
repeated lines as it folds its own failures: the first line of a cause, then one line a minute
(and one at exit) with how many more there were. The outage itself costs nothing: events
produced during it are scored once the broker is back."""
from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from ctxprec.collector.stub_judge import StubJudge
from tests.chaos.tcp_proxy import TcpProxy
from tests.helpers.processes import free_port
from tests.kafka.serve_proc import ServeProcess
from tests.kafka.tansu import Broker, create_topic, produce, rag_event

pytestmark = pytest.mark.slow

OUTAGE_S = 15.0
FIRST, DURING = 20, 20
# Library lines a 15 s outage may leave: a few causes (connection refused, metadata, the group
# coordinator, the fetcher), each once, plus their counts at exit.
MAX_LIBRARY_LINES = 30


async def wait_evaluated(serve: ServeProcess, n: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while serve.metric("ctxprec_samples_total", decision="evaluated") < n:
        assert serve.alive() and time.monotonic() < deadline, serve.log_tail()
        await asyncio.sleep(0.2)


async def test_a_broker_outage_leaves_a_few_lines_not_thousands(
        make_stub_judge: Callable[..., Awaitable[StubJudge]], tmp_path: Path) -> None:
    stub = await make_stub_judge()
    proxy_port = free_port()
    broker = Broker(free_port(), tmp_path / "broker.log", advertised_port=proxy_port)
    broker.start()
    proxy = TcpProxy(broker.port)
    proxy.port = proxy_port
    await proxy.up()
    bootstrap = f"127.0.0.1:{proxy_port}"
    topic, results = "logs-outage", "logs-outage.scores"
    serve = ServeProcess(bootstrap, topic, results, stub.url, tmp_path / "serve.log")
    try:
        await create_topic(bootstrap, topic)
        await create_topic(bootstrap, results)
        serve.start()
        await asyncio.to_thread(serve.wait_ready)
        await produce(bootstrap, topic, ((None, json.dumps(rag_event(i)).encode()) for i in range(FIRST)))
        await wait_evaluated(serve, FIRST)

        outage_from = len(serve.log_path.read_text(errors="replace").splitlines())
        await proxy.down()
        await asyncio.sleep(OUTAGE_S)
        assert serve.alive(), serve.log_tail()
        await proxy.up()
        await produce(broker.bootstrap, topic, ((None, json.dumps(rag_event(i)).encode())
                                                for i in range(FIRST, FIRST + DURING)))
        await wait_evaluated(serve, FIRST + DURING, timeout_s=90)
        assert await asyncio.to_thread(serve.terminate, 30.0) == 0, serve.log_tail()
    finally:
        serve.kill()
        await proxy.down()
        broker.stop()

    lines = serve.log_path.read_text(errors="replace").splitlines()[outage_from:]
    library = [line for line in lines if re.match(r"\S+ \S+ (ERROR|WARNING|INFO) aiokafka", line)]
    counts = [int(m.group(1)) for line in library if (m := re.search(r"(\d+) more like this in the last", line))]
    # The outage did make aiokafka repeat itself (else nothing was tested), and those lines were
    # counted rather than written.
    assert sum(counts) >= 20, "\n".join(library)
    assert len(library) <= MAX_LIBRARY_LINES, "\n".join(library)
