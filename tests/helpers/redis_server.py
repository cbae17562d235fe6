"""A real `redis-server` (Debian's package, installed by `make test` when missing) on a free
127.0.0.1 port, in memory only, for the shared verdict cache's tests and benchmark. `stop()` and
`start()` again keep the port, as a store that goes away and comes back would."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.processes import free_port, stop_process, wait_listening


@dataclass
class RedisServer:
    log_path: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run `sh tests/install-system-deps.sh` (make test does)")
        self.port = self.port or free_port()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--daemonize", "no", "--protected-mode", "yes"], stdout=log, stderr=subprocess.STDOUT)
        wait_listening(self.proc, self.port, name="redis-server", log_path=self.log_path, timeout_s=10)

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None
