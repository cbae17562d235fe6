"""The README's dry run works pasted as it is: the stub judge, the sidecar and one trace from the
OpenTelemetry SDK give one score line and one evaluated sample."""
from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PORTS = (8099, 4317, 4318, 9464)  # the ones the README uses


def _readme_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Dry run with the stub judge", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, "no sh block in the README's dry-run section"
    return match.group(1)


def _busy(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_the_readme_dry_run_scores_one_trace() -> None:
    busy = [port for port in PORTS if _busy(port)]
    assert not busy, f"ports {busy} are taken on this machine; the README's dry run needs them free"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXPREC_", "OTEL_"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    done = subprocess.run(["bash", "-c", _readme_block()], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"scored dry-run retrieve \(trace [0-9a-f]{32}\): 0\.83 against the output; "
                     r"The score is 0\.83 because 2 of 3", output), output
    assert 'ctxprec_samples_total{decision="evaluated",service="dry-run"} 1.0' in output, output
    assert "Traceback" not in output, output
    assert not [port for port in PORTS if _busy(port)], "the dry run left a process listening"
