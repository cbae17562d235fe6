"""Reading an HTTP response body from another server with a bound on its size: the judge's answer,
a result sink's backend, the OTLP endpoint spans are forwarded to. A server that declares or
streams more than the bound is cut off there, so a broken or hostile peer costs at most `limit`
bytes of memory, never the whole of what it sends."""
from __future__ import annotations

import aiohttp

_CHUNK = 64 * 1024


class BodyTooLarge(Exception):
    """The body declared (Content-Length) or sent more than `limit` bytes; nothing more was read."""

    def __init__(self, limit: int, declared: int | None = None) -> None:
        said = f"declared {declared} bytes" if declared is not None else "sent more"
        super().__init__(f"response body {said}, over the limit of {limit} bytes")
        self.limit = limit
        self.declared = declared


async def read_body(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, or BodyTooLarge once it passes `limit` bytes (decompressed, as aiohttp
    hands it over). The connection is closed then: what is left of the body is never read."""
    declared = response.content_length
    if declared is not None and declared > limit:
        response.close()
        raise BodyTooLarge(limit, declared)
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        size += len(chunk)
        if size > limit:
            response.close()
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_text(response: aiohttp.ClientResponse, limit: int) -> str:
    """`read_body` as text in the response's charset (UTF-8 by default), undecodable bytes replaced."""
    raw = await read_body(response, limit)
    try:
        return raw.decode(response.charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return raw.decode("utf-8", errors="replace")
