"""Real servers the tests and benchmarks start in processes of their own (Tansu, redis-server, the
llama server, Phoenix, `ctxprec serve`): a free port to give them, the wait until one listens,
and a stop that ends it whatever state it is in."""
from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(proc: subprocess.Popen[bytes], port: int, *, name: str, log_path: Path,
                   timeout_s: float) -> None:
    """Returns once 127.0.0.1:`port` takes a connection; raises, naming the log, when the process
    exits first or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}; see {log_path}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not start listening within {timeout_s:g} s; see {log_path}")


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
