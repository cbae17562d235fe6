"""Reaching the brokers: a broker that is not up yet (a common start-up order in Kubernetes) is
retried with backoff, one WARNING per failed attempt, by the receiver and by both producers."""
from __future__ import annotations

import logging
from typing import Awaitable, Callable

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from ctxprec.collector.kafka.config import KafkaConnection
from ctxprec.scorer.retry import Backoff
from tenacity import RetryCallState

log = logging.getLogger(__name__)

CONNECT_BACKOFF = Backoff(base_s=0.5, cap_s=10.0)


async def until_connected(connect: Callable[[], Awaitable[None]], connection: KafkaConnection, who: str) -> None:
    """Runs `connect` until it does not raise a KafkaError."""
    def warn(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("%s: cannot reach %s (%s); retrying", who, connection.bootstrap, error)

    async for attempt in CONNECT_BACKOFF.retrying(retry_on=KafkaError, on_retry=warn):
        with attempt:
            await connect()


async def start_producer(connection: KafkaConnection, role: str, who: str) -> AIOKafkaProducer:
    """A started producer (acks=all), retried until the brokers answer."""
    started: list[AIOKafkaProducer] = []

    async def connect() -> None:
        producer = AIOKafkaProducer(acks="all", linger_ms=5, **connection.client_options(role))
        try:
            await producer.start()
        except KafkaError:
            await producer.stop()
            raise
        started.append(producer)

    await until_connected(connect, connection, who)
    return started[0]
