"""Fixtures for the Kafka suite: a real Kafka-compatible broker (Tansu, see tansu.py), in
memory, on a free 127.0.0.1 port. `broker` is module-scoped (it starts in well under a second);
each test uses its own topic names (`unique_topic`) so tests never see each other's data."""
from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from tests.helpers.processes import free_port
from tests.kafka.tansu import Broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(free_port(), tmp_path_factory.mktemp("tansu") / "broker.log")
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def unique_topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
