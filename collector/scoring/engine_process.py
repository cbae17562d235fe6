"""ProcessEngine: the scoring engine in a child process, behind the engine's own interface.

Why: the sidecar is one asyncio thread. Reading Kafka at hundreds of thousands of messages a
second keeps that thread busy, and every score costs it about a quarter of a millisecond of CPU
(prompt, HTTP request and response, verdict parsing). In a scoring process that work moves to
another core; the sidecar only pickles the sample and unpickles the result.

`score`, `warm_up`, `aclose` and the identity attributes (`model`, `prompt_version`,
`annotator_kind`, `fingerprint`, `scale`) are those of `ctxprec.scorer.engine.ContextPrecisionEngine`,
so `ScoringWorkers` and the exporters cannot tell the difference. Judge request events (and the
shared verdict cache's) come back over the pipe and reach the same observers (the judge_* metrics). Input errors are raised here,
before anything crosses the pipe.

The child is started by `warm_up` (or the first score). If it dies, the scores it held fail
with error type `scoring_process_exited` (decisions, never lost or invented), and the next score
starts a new one, at most once per `RESTART_INTERVAL_S`. The child ends when its socket closes,
so it never outlives the sidecar, even one killed with SIGKILL.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ctxprec.collector.memory import anonymous_rss_bytes
from ctxprec.collector.scoring.frames import FrameError, Outbox, read_frame
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import check_inputs, engine_identity
from ctxprec.scorer.judge.chat import JudgeError, RequestObserver
from ctxprec.scorer.judge.shared_cache import CacheEvent, CacheObserver
from ctxprec.scorer.result import JudgeUsage, ScoreResult

log = logging.getLogger(__name__)

EXITED = "scoring_process_exited"
UNAVAILABLE = "scoring_process_unavailable"
START_TIMEOUT_S = 60.0  # imports and the judge client's warm-up
CLOSE_TIMEOUT_S = 5.0
RESTART_INTERVAL_S = 1.0


@dataclass(eq=False)
class _Child:
    """One scoring process and the scores it holds (a replacement has its own)."""

    proc: asyncio.subprocess.Process
    outbox: Outbox
    pending: dict[int, "asyncio.Future[ScoreResult]"] = field(default_factory=dict)
    reader: "asyncio.Task[None] | None" = None


class ProcessEngine:
    def __init__(self, config: JudgeConfig, *, scale: float = 1, observer: RequestObserver | None = None,
                 log_level: str = "warning", cache_observer: CacheObserver | None = None) -> None:
        identity = engine_identity(config, scale=scale)
        self.model = identity.model
        self.prompt_version = identity.prompt_version
        self.annotator_kind = identity.annotator_kind
        self.fingerprint = identity.fingerprint
        self.scale = identity.scale
        self.config = config
        self.observer = observer
        self.cache_observer = cache_observer
        self.log_level = log_level
        self._spawned = 0
        self._child: _Child | None = None  # None: no live scoring process
        self._ids = itertools.count()
        self._start_lock = asyncio.Lock()
        self._last_start = -RESTART_INTERVAL_S
        self._closed = False

    @property
    def restarts(self) -> int:
        """Scoring processes started to replace one that stopped."""
        return max(0, self._spawned - 1)

    @property
    def pid(self) -> int | None:
        return self._child.proc.pid if self._child is not None else None

    def rss_bytes(self) -> int:
        """The memory the scoring process's work holds (0 when it is not running; see
        collector/memory.py)."""
        pid = self.pid
        return anonymous_rss_bytes(pid) if pid is not None else 0

    # -- the engine interface ---------------------------------------------------------------

    async def warm_up(self) -> None:
        await self._ensure_started()

    async def score(self, query: str, contexts: Sequence[str], *, output: str | None = None,
                    expected_output: str | None = None) -> ScoreResult:
        items = check_inputs(query, contexts)
        # The engine ignores a reference that is not a string; only strings cross the pipe.
        output = output if isinstance(output, str) else None
        expected_output = expected_output if isinstance(expected_output, str) else None
        child = self._child or await self._ensure_started()
        score_id = next(self._ids)
        future: asyncio.Future[ScoreResult] = asyncio.get_running_loop().create_future()
        child.pending[score_id] = future
        child.outbox.put(("score", score_id, query, items, output, expected_output))
        try:
            return await future
        except asyncio.CancelledError:
            child.outbox.put(("cancel", score_id))
            raise
        finally:
            child.pending.pop(score_id, None)

    async def aclose(self) -> None:
        self._closed = True
        child = self._child
        if child is None:
            return
        child.outbox.put(("close",))
        try:
            await child.outbox.drain()
        except (ConnectionError, OSError):
            pass
        await _wait_or_kill(child.proc, CLOSE_TIMEOUT_S)
        if child.reader is not None:
            await asyncio.gather(child.reader, return_exceptions=True)
        _fail(child, "the sidecar shut down before the scoring process answered", "shutdown")

    # -- the child ----------------------------------------------------------------------------

    async def _ensure_started(self) -> _Child:
        async with self._start_lock:
            if self._child is not None:
                return self._child
            if self._closed:
                raise JudgeError("the scoring process is shut down", kind="shutdown")
            wait = self._last_start + RESTART_INTERVAL_S - time.monotonic()
            if wait > 0:  # a child that keeps dying must not be restarted in a tight loop
                await asyncio.sleep(wait)
            self._last_start = time.monotonic()
            try:
                return await self._spawn()
            except JudgeError:
                raise
            except (OSError, FrameError, asyncio.TimeoutError) as exc:
                raise JudgeError(f"the scoring process could not start: {exc or type(exc).__name__}",
                                 kind=UNAVAILABLE) from None

    async def _spawn(self) -> _Child:
        parent_end, child_end = socket.socketpair()
        env = dict(os.environ)
        # The child imports this package the way the parent did, installed or from a checkout.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "ctxprec.collector.scoring.engine_child", "--fd", str(child_end.fileno()),
                "--log-level", self.log_level, pass_fds=(child_end.fileno(),), stdin=asyncio.subprocess.DEVNULL,
                env=env)
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent_end)
        outbox = Outbox(writer)
        outbox.put(("init", {"judge": self.config, "scale": self.scale}))
        try:
            first = await asyncio.wait_for(self._read_until_ready(reader), START_TIMEOUT_S)
        except BaseException:
            writer.close()
            await _wait_or_kill(proc, 0)
            raise
        if first is not None:
            writer.close()
            await _wait_or_kill(proc, CLOSE_TIMEOUT_S)
            raise JudgeError(f"the scoring process could not build the judge: {first}", kind=UNAVAILABLE)
        self._spawned += 1
        child = self._child = _Child(proc, outbox)
        child.reader = asyncio.create_task(self._read(child, reader, writer), name="ctxprec-scoring-process")
        log.info("scoring process %d started", proc.pid)
        return child

    async def _read_until_ready(self, reader: asyncio.StreamReader) -> str | None:
        """None once the child is ready, or the reason it could not start."""
        while True:
            messages = await read_frame(reader)
            if messages is None:
                return "it exited during start-up (its log above says why)"
            for message in messages:
                if message[0] == "ready":
                    self._handle(None, [m for m in messages if m[0] != "ready"])
                    return None
                if message[0] == "init_failed":
                    return str(message[1])
            self._handle(None, messages)

    async def _read(self, child: _Child, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reason = "its connection closed"
        try:
            while True:
                messages = await read_frame(reader)
                if messages is None:
                    break
                self._handle(child, messages)
        except (FrameError, ConnectionError, OSError) as exc:
            reason = f"its connection failed: {exc}"
        except Exception as exc:  # e.g. an unpicklable answer: the stream cannot be trusted any more
            log.exception("scoring process: unreadable answer")
            reason = f"an unreadable answer ({type(exc).__name__})"
        finally:
            if self._child is child:
                self._child = None  # the next score starts a new one
            writer.close()
        code = await _wait_or_kill(child.proc, CLOSE_TIMEOUT_S)
        if not self._closed:
            log.error("scoring process %d stopped (exit code %s, %s); %d scores in flight failed; "
                      "a new one starts with the next score", child.proc.pid, code, reason, len(child.pending))
            _fail(child, f"the scoring process stopped (exit code {code}) before it answered", EXITED)

    def _handle(self, child: _Child | None, messages: list[tuple[Any, ...]]) -> None:
        pending = child.pending if child is not None else {}
        for message in messages:
            op = message[0]
            if op == "result":
                future = pending.get(message[1])
                if future is not None and not future.done():
                    future.set_result(message[2])
            elif op == "error":
                future = pending.get(message[1])
                if future is not None and not future.done():
                    future.set_exception(_rebuild_error(message[2], message[3], message[4]))
            elif op == "events":
                for event in message[1]:
                    # The child's judge requests and shared-cache lookups share one stream.
                    observer = self.cache_observer if isinstance(event, CacheEvent) else self.observer
                    if observer is not None:
                        observer(event)
            else:
                log.error("scoring process: unknown message %r ignored", op)


def _fail(child: _Child, message: str, kind: str) -> None:
    for future in list(child.pending.values()):
        if not future.done():
            future.set_exception(JudgeError(message, kind=kind))


def _rebuild_error(kind: str, message: str, usage: JudgeUsage | None = None) -> Exception:
    """The child's error, as the in-process engine would have raised it (see engine_child)."""
    if kind == "value":
        return ValueError(message)
    error = JudgeError(message, kind=kind)
    error.usage = usage
    return error


async def _wait_or_kill(proc: asyncio.subprocess.Process, timeout_s: float) -> int | None:
    try:
        return await asyncio.wait_for(proc.wait(), max(timeout_s, 0.01))
    except asyncio.TimeoutError:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
        return await proc.wait()
