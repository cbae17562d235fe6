"""A Tansu Kafka broker per test (tests/kafka/tansu.py): chaos tests stop and restart it."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers.processes import free_port
from tests.kafka.tansu import Broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(free_port(), tmp_path / "broker.log")
    b.start()
    try:
        yield b
    finally:
        b.stop()
