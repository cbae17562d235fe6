"""The scoring process: runs the scoring engine for its parent sidecar, over a socketpair.

Started by `engine_process.ProcessEngine` as `python -m ctxprec.collector.scoring.engine_child --fd N`.
The first frame carries the judge configuration; the child builds the engine, warms it up and
answers `("ready",)` (or `("init_failed", message)`). Then, per message:

    ("score", id, query, contexts, output, expected_output) -> ("result", id, ScoreResult)
                                                             or ("error", id, kind, message, usage)
    ("cancel", id)                                            -> the score is abandoned, no answer
    ("close",)                                                -> finish: cancel, close, exit

and, whenever the judge client reports an HTTP attempt, `("events", [RequestEvent, ...])`, which
the parent turns into judge metrics. The end of the stream (the parent exited, even by kill -9)
ends the child the same way as `close`, so a scoring process never outlives its sidecar.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from typing import Any

from ctxprec.collector.scoring.frames import FrameError, Outbox, read_frame
from ctxprec.scorer.engine import build_engine
from ctxprec.scorer.judge.chat import JudgeError, RequestEvent
from ctxprec.scorer.judge.shared_cache import CacheEvent

log = logging.getLogger("ctxprec.scoring_process")


def error_message(score_id: int, exc: BaseException) -> tuple[Any, ...]:
    """How a failed score crosses the pipe: a ValueError stays an input error; anything else
    becomes a JudgeError of the same kind, or named by its type (the failure record's error type,
    as the in-process workers name it)."""
    if isinstance(exc, ValueError):
        return ("error", score_id, "value", str(exc), None)
    kind = exc.kind if isinstance(exc, JudgeError) else type(exc).__name__
    usage = exc.usage if isinstance(exc, JudgeError) else None  # a failed sample keeps its cost
    return ("error", score_id, kind, str(exc) or type(exc).__name__, usage)


class EngineServer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.outbox = Outbox(writer)
        self.engine: Any = None
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._events: list[RequestEvent | CacheEvent] = []

    def _observe(self, event: RequestEvent | CacheEvent) -> None:
        if not self._events:
            asyncio.get_running_loop().call_soon(self._send_events)
        self._events.append(event)

    def _send_events(self) -> None:
        events, self._events = self._events, []
        if events:
            self.outbox.put(("events", events))

    async def run(self) -> None:
        init = await read_frame(self.reader)
        if not init or init[0][0] != "init":
            raise FrameError("the first frame must be ('init', settings)")
        settings: dict[str, Any] = init[0][1]
        try:
            self.engine = build_engine(settings["judge"], scale=settings["scale"], observer=self._observe,
                                       cache_observer=self._observe)
            await self.engine.warm_up()
        except Exception as exc:  # a bad judge configuration: the parent reports it
            self.outbox.put(("init_failed", f"{type(exc).__name__}: {exc}"))
            await self.outbox.drain()
            return
        self.outbox.put(("ready", os.getpid()))
        try:
            while True:
                messages = await read_frame(self.reader)
                if messages is None:
                    break
                if not self._dispatch(messages):
                    break
        finally:
            await self._finish()

    def _dispatch(self, messages: list[tuple[Any, ...]]) -> bool:
        for message in messages:
            op = message[0]
            if op == "score":
                _, score_id, query, contexts, output, expected = message
                task = asyncio.create_task(self._score(score_id, query, contexts, output, expected))
                self._tasks[score_id] = task
            elif op == "cancel":
                task = self._tasks.pop(message[1], None)
                if task is not None:
                    task.cancel()
            elif op == "close":
                return False
            else:
                log.error("scoring process: unknown message %r ignored", op)
        return True

    async def _score(self, score_id: int, query: Any, contexts: Any, output: Any, expected: Any) -> None:
        try:
            result = await self.engine.score(query, contexts, output=output, expected_output=expected)
        except asyncio.CancelledError:
            return  # the parent abandoned it (its own shutdown): nobody waits for an answer
        except Exception as exc:
            if not isinstance(exc, (JudgeError, ValueError)):
                log.exception("scoring process: score %d failed", score_id)
            self.outbox.put(error_message(score_id, exc))
        else:
            self.outbox.put(("result", score_id, result))
        finally:
            self._tasks.pop(score_id, None)

    async def _finish(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._send_events()
        try:
            await self.outbox.drain()
        except (ConnectionError, OSError):
            pass  # the parent is gone
        if self.engine is not None:
            await self.engine.aclose()


async def serve_fd(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    try:
        await EngineServer(reader, writer).run()
    except (ConnectionError, FrameError) as exc:
        log.error("scoring process: connection to the sidecar lost: %s", exc)
    finally:
        writer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxprec.collector.scoring.engine_child", description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="the socketpair end inherited from the sidecar")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s[scoring process]: %(message)s")
    # Ctrl-C in a terminal, and systemd's stop, signal the whole process group; the sidecar
    # drives shutdown (it lets the scores in flight finish, then closes the socket), so the child
    # must not die first. The end of the socket ends it in every case, even a SIGKILLed parent.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    asyncio.run(serve_fd(args.fd))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
