"""A stand-in sidecar for test_engine_process: it starts a ProcessEngine (model "local"), warms it
up, scores once, prints `child <pid>` on stdout and then sleeps until it is killed. The test kills
this process with SIGKILL and checks that the scoring process does not outlive it.

Run as `python -m tests.collector.engine_process_app` from the repository root."""
from __future__ import annotations

import asyncio
import sys

from ctxprec.collector.scoring.engine_process import ProcessEngine
from ctxprec.scorer.config import JudgeConfig


async def main() -> None:
    engine = ProcessEngine(JudgeConfig(model="local"))
    await engine.warm_up()
    # One real score, so the child is known to be serving (not only started) when we are killed.
    await engine.score("how to reset a password", ["reset your password in settings"])
    sys.stdout.write(f"child {engine.pid}\n")
    sys.stdout.flush()
    await asyncio.sleep(3600)  # bounded: the test kills us long before this ends


if __name__ == "__main__":
    asyncio.run(main())
