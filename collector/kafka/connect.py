"""Reaching the brokers: a broker that is not up yet (a common start-up order in Kubernetes) is
retried with backoff, one WARNING per failed attempt, by the receiver and by both producers."""
from __future__ import annotations

import logging
from typing import Awaitable, Callable

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from ctxprec.collector.kafka.config import KafkaConfig
from ctxprec.scorer.retry import Backoff
from tenacity import RetryCallState

log = logging.getLogger(__name__)

CONNECT_BACKOFF = Backoff(base_s=0.5, cap_s=10.0)


async def until_connected(connect: Callable[[], Awaitable[None]], settings: KafkaConfig, who: str) -> None:
    """Runs `connect` until it does not raise a KafkaError."""
    def warn(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("%s: cannot reach %s (%s); retrying", who, settings.bootstrap, error)

    async for attempt in CONNECT_BACKOFF.retrying(retry_on=KafkaError, on_retry=warn):
        with attempt:
            await connect()


async def start_producer(settings: KafkaConfig, client_suffix: str, who: str) -> AIOKafkaProducer:
    """A started producer (acks=all), retried until the brokers answer."""
    started: list[AIOKafkaProducer] = []

    async def connect() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers,
                                    client_id=f"{settings.client_id}-{client_suffix}", acks="all", linger_ms=5,
                                    **settings.security.client_options())
        try:
            await producer.start()
        except KafkaError:
            await producer.stop()
            raise
        started.append(producer)

    await until_connected(connect, settings, who)
    return started[0]
