"""Length-prefixed pickle frames between the sidecar and its scoring process.

A frame is a 4-byte big-endian length and a pickled list of messages (tuples). Writes go through
an `Outbox` that gathers every message queued in one turn of the event loop into one frame: the
Kafka receiver hands a whole fetched batch to scoring in one turn, so its sampled events cross
the pipe together, and so do the results and judge-request events the scoring process produces
together. Pickle is safe here because both ends are the same program, joined by a socketpair
that nothing else can reach.
"""
from __future__ import annotations

import asyncio
import pickle
import struct
from typing import Any

_HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 1 << 30  # a guard against a corrupt length, far above any real batch


class FrameError(Exception):
    """The other end sent something that is not a frame (a bug, or a foreign writer)."""


async def read_frame(reader: asyncio.StreamReader) -> list[tuple[Any, ...]] | None:
    """The next frame's messages, or None at a clean end of stream."""
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("the stream ended inside a frame header") from None
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {size} bytes announced; the limit is {MAX_FRAME_BYTES}")
    try:
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise FrameError("the stream ended inside a frame") from None
    messages = pickle.loads(body)
    if type(messages) is not list:
        raise FrameError(f"a frame must hold a list of messages, got {type(messages).__name__}")
    return messages


def encode_frame(messages: list[tuple[Any, ...]]) -> bytes:
    body = pickle.dumps(messages, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


class Outbox:
    """Queues messages and writes them as one frame at the end of the current loop turn."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._messages: list[tuple[Any, ...]] = []
        self._scheduled = False
        self.closed = False

    def put(self, message: tuple[Any, ...]) -> None:
        if self.closed:
            return
        self._messages.append(message)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if not self._messages or self.closed:
            return
        messages, self._messages = self._messages, []
        if self.writer.is_closing():
            self.closed = True
            return
        # The transport buffers without bound; the peer reads continuously and each side's
        # in-flight work is bounded elsewhere (the scoring queue, judge concurrency).
        self.writer.write(encode_frame(messages))

    async def drain(self) -> None:
        self.flush()
        if not self.writer.is_closing():
            await self.writer.drain()
