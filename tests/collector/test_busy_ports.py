"""A listener whose address another process took: each one (OTLP/gRPC, OTLP/HTTP, metrics) raises
AddressInUse when it binds, and the sidecar turns it into one line naming the flag, with nothing
logged before it (no shutdown warning for the work a failed start never had)."""
from __future__ import annotations

import logging
import socket

import pytest

from ctxprec.collector.listeners import AddressInUse, check_free
from ctxprec.collector.serve import address_in_use
from tests.collector.rag_app import running, serve_config


@pytest.fixture
def taken() -> socket.socket:
    """A port another process listens on (no SO_REUSEPORT, as a server binds)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def test_the_check_finds_a_taken_address_and_passes_a_free_one(taken: socket.socket) -> None:
    port = taken.getsockname()[1]
    with pytest.raises(AddressInUse):
        check_free("127.0.0.1", port)
    check_free("127.0.0.1", 0)
    taken.close()
    check_free("127.0.0.1", port)


@pytest.mark.parametrize("flag", ["--otlp-grpc", "--otlp-http", "--metrics"])
async def test_a_listener_that_finds_its_address_taken_is_named_by_its_flag(
        flag: str, taken: socket.socket, caplog: pytest.LogCaptureFixture) -> None:
    port = taken.getsockname()[1]
    config = serve_config(flag, f"127.0.0.1:{port}", "--judge-model", "local")
    assert address_in_use(config) == (f"{flag} 127.0.0.1:{port} is already in use (another ctxprec serve, or "
                                      f"another server, listens there); stop it or give {flag} another address")
    caplog.set_level(logging.INFO)
    with pytest.raises(AddressInUse) as raised:  # the race: taken after the check, when it binds
        async with running(config):
            pass
    assert address_in_use(config, raised.value) == address_in_use(config)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
