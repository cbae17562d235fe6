"""Secure defaults of the listeners: loopback unless told otherwise, a bearer token (from a file
or CTXPREC_METRICS_TOKEN) guarding /metrics and /diagnostics/ with the probes open, TLS on the
metrics port, and one WARNING per listener exposed without protection."""
from __future__ import annotations

import asyncio
import logging
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from ctxprec.collector import config as config_module
from ctxprec.collector.listener_security import is_loopback
from ctxprec.collector.serve import exposure_warnings

from tests.collector.rag_app import running, serve_config

TOKEN = "m3trics-T0KEN-value"


async def _get(url: str, token: str | None = None, ssl_context: ssl.SSLContext | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as session:
        async with session.get(url, headers=headers, ssl=ssl_context) as response:
            return response.status, await response.text()


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.1.2.3")
    assert is_loopback("::ffff:7f00:1")  # 127.0.0.1 on an IPv6 socket
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.0.0.5")
    assert not is_loopback("::ffff:a00:5")
    assert not is_loopback("my-host")


def _listening_addresses(pid: int) -> list[tuple[str, int]]:
    """(address, port) of the TCP sockets in LISTEN state that process `pid` holds, from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            hex_address, hex_port = local.split(":")
            raw = bytes.fromhex(hex_address)
            # /proc prints each 32-bit word in host (little-endian) order.
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            import ipaddress

            found.append((str(ipaddress.ip_address(words)), int(hex_port, 16)))
    return found


@pytest.mark.slow
def test_serve_with_no_address_flags_listens_on_loopback_only() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXPREC_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    proc = subprocess.Popen([sys.executable, "-m", "ctxprec.collector.cli", "serve"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        listening: list[tuple[str, int]] = []
        while time.monotonic() < deadline and proc.poll() is None:
            listening = _listening_addresses(proc.pid)
            if {port for _, port in listening} >= {4317, 4318, 9464}:
                break
            time.sleep(0.2)
        assert {port for _, port in listening} >= {4317, 4318, 9464}, (listening, proc.poll())
        assert all(is_loopback(address) for address, _ in listening), listening
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode()
    assert b"no token and no TLS" not in err  # loopback listeners are not warned about


async def test_metrics_token_guards_metrics_and_diagnostics_and_leaves_probes_open(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    token_file = tmp_path / "metrics-token"
    token_file.write_text(TOKEN + "\n")
    caplog.set_level(logging.DEBUG)
    async with running(serve_config("--metrics-token-file", str(token_file), "--judge-model", "local")) as pipeline:
        base = pipeline.metrics_url
        status, body = await _get(f"{base}/metrics")
        assert status == 401 and "ctxprec_" not in body
        status, body = await _get(f"{base}/metrics", token="wrong-guess-123")
        assert status == 401 and "wrong-guess-123" not in body
        status, metrics_text = await _get(f"{base}/metrics", token=TOKEN)
        assert status == 200 and "ctxprec_build_info" in metrics_text
        assert (await _get(f"{base}/healthz"))[0] == 200
        assert (await _get(f"{base}/readyz"))[0] == 200
        status, _ = await _get(f"{base}/diagnostics/documents")
        assert status == 401
        status, _ = await _get(f"{base}/diagnostics/documents", token="wrong-guess-123")
        assert status == 401
        status, _ = await _get(f"{base}/diagnostics/documents", token=TOKEN)
        assert status == 200  # past the guard, to the diagnostics
    assert TOKEN not in metrics_text
    assert all(TOKEN not in record.getMessage() for record in caplog.records)
    assert all("wrong-guess-123" not in record.getMessage() for record in caplog.records)


async def test_metrics_open_serves_metrics_without_the_token_but_not_diagnostics() -> None:
    config = config_module.load(_parse("--metrics", "127.0.0.1:0", "--metrics-open", "--otlp-grpc", "off",
                                       "--otlp-http", "off"),
                                environ={"CTXPREC_METRICS_TOKEN": TOKEN})
    async with running(config) as pipeline:
        base = pipeline.metrics_url
        assert (await _get(f"{base}/metrics"))[0] == 200
        assert (await _get(f"{base}/diagnostics/documents"))[0] == 401
        assert (await _get(f"{base}/diagnostics/documents", token=TOKEN))[0] == 200
    assert TOKEN not in repr(config)


async def test_diagnostics_without_a_token_answer_only_on_loopback() -> None:
    async with running(serve_config("--metrics", "0.0.0.0:0")) as pipeline:
        port = pipeline.metrics_server.port  # type: ignore[union-attr]
        status, body = await _get(f"http://127.0.0.1:{port}/diagnostics/documents")
        assert status == 403 and "metrics token" in body
        assert (await _get(f"http://127.0.0.1:{port}/metrics"))[0] == 200
        # People's labels change what the sidecar reports: the same rule as the diagnostics.
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{port}/labels", data=b"{}",
                                    headers={"Content-Type": "application/x-ndjson"}) as response:
                assert response.status == 403 and "metrics token" in await response.text()
    async with running(serve_config()) as pipeline:
        assert (await _get(f"{pipeline.metrics_url}/diagnostics/documents"))[0] == 200


def _parse(*flags: str) -> object:
    import argparse

    parser = argparse.ArgumentParser()
    config_module.add_arguments(parser)
    return parser.parse_args(list(flags))


@pytest.fixture(scope="module")
def server_cert(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("metrics-tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", "server.key", "-out", "server.crt", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"], cwd=d, check=True, capture_output=True)
    return {"crt": d / "server.crt", "key": d / "server.key"}


async def test_metrics_over_tls(server_cert: dict[str, Path]) -> None:
    config = serve_config("--metrics-tls-cert", str(server_cert["crt"]), "--metrics-tls-key", str(server_cert["key"]))
    async with running(config) as pipeline:
        assert pipeline.metrics_url.startswith("https://")
        context = ssl.create_default_context(cafile=str(server_cert["crt"]))
        status, body = await _get(f"{pipeline.metrics_url}/metrics", ssl_context=context)
        assert status == 200 and "ctxprec_build_info" in body
        with pytest.raises(aiohttp.ClientError):  # plain HTTP is not answered
            await _get(pipeline.metrics_url.replace("https://", "http://") + "/metrics")


def test_one_warning_per_exposed_listener_without_protection(tmp_path: Path) -> None:
    exposed = serve_config("--otlp-grpc", "0.0.0.0:4317", "--otlp-http", "0.0.0.0:4318", "--metrics", "0.0.0.0:9464")
    warnings = exposure_warnings(exposed)
    assert len(warnings) == 3
    assert any(w.startswith("OTLP/gRPC listens on 0.0.0.0:4317") for w in warnings)
    assert any(w.startswith("metrics listen on 0.0.0.0:9464") for w in warnings)
    assert exposure_warnings(serve_config()) == []  # loopback
    token = tmp_path / "t"
    token.write_text("receiver-secret")
    guarded = serve_config("--otlp-grpc", "0.0.0.0:4317", "--otlp-http", "0.0.0.0:4318", "--metrics", "0.0.0.0:9464",
                           "--receiver-auth-token-file", str(token), "--metrics-open")
    assert exposure_warnings(guarded) == []  # a token on the receivers; an open scrape chosen explicitly


async def test_exposed_listeners_are_warned_about_at_start(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with running(serve_config("--otlp-http", "0.0.0.0:0", "--otlp-grpc", "off")):
        pass
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("OTLP/HTTP listens on 0.0.0.0" in line for line in lines) == 1, lines
    assert not any(line.startswith("metrics listen") for line in lines)


async def test_receiver_token_from_a_file(tmp_path: Path) -> None:
    token = tmp_path / "receiver-token"
    token.write_text("  rcv-secret-1 \n")
    config = serve_config("--receiver-auth-token-file", str(token))
    assert config.receivers.security().bearer_token == "rcv-secret-1"
    assert "rcv-secret-1" not in repr(config)
    async with running(config) as pipeline:
        url = f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=b"", headers={"Content-Type": "application/x-protobuf"}) as response:
                assert response.status == 401
            async with session.post(url, data=b"", headers={"Content-Type": "application/x-protobuf",
                                                            "Authorization": "Bearer rcv-secret-1"}) as response:
                assert response.status == 200


@pytest.mark.parametrize("flags, message", [
    (["--metrics-token-file", "{empty}"], "is empty"),
    (["--receiver-auth-token", "x", "--receiver-auth-token-file", "{token}"], "give one or the other"),
    (["--metrics-tls-cert", "{token}"], "give both or neither"),
])
def test_bad_security_settings_are_refused_with_the_key_named(tmp_path: Path, flags: list[str], message: str) -> None:
    (tmp_path / "empty").write_text("  \n")
    (tmp_path / "token").write_text("abc")
    args = [f.format(empty=tmp_path / "empty", token=tmp_path / "token") for f in flags]
    with pytest.raises(config_module.ConfigError) as caught:
        config_module.load(_parse(*args), environ={})
    assert message in str(caught.value)
    assert "abc" not in str(caught.value)
