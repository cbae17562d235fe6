"""pytest plugin: one real Phoenix server per test session.

Load it with `pytest_plugins = ["tests.helpers.phoenix_fixture"]` in a conftest. It never skips:
a missing .venv-phoenix is an install problem, and a silently skipped test would hide it.
"""
from __future__ import annotations

from typing import Iterator

import pytest

from tests.helpers.phoenix import PhoenixClient, PhoenixNotInstalled, PhoenixServer


@pytest.fixture(scope="session")
def phoenix_server() -> Iterator[PhoenixServer]:
    try:
        server = PhoenixServer()
    except PhoenixNotInstalled as exc:
        missing = str(exc)
    else:
        missing = ""
    if missing:  # failed outside the except block, so pytest shows the message once
        pytest.fail(missing, pytrace=False)
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def phoenix_client(phoenix_server: PhoenixServer) -> PhoenixClient:
    return PhoenixClient(phoenix_server.url)
