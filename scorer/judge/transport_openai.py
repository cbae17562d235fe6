"""The direct path to OpenAI-compatible endpoints (OpenAI, vLLM, the stub judge, ...): one pooled
aiohttp session, one POST per attempt, a hand-built body and a lean reply parser.

Why not litellm here: litellm.acompletion spends ~10 ms of CPU per call building and
validating its request and response objects, where a bare aiohttp POST spends ~0.35 ms. A sidecar
scoring hundreds of samples per second on a small CPU quota cannot afford the former."""
from __future__ import annotations

import json
from typing import Any, Sequence

import aiohttp
from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.http_body import BodyTooLarge, read_body
from ctxprec.scorer.judge.chat import ChatMessage
from ctxprec.scorer.judge.client import AttemptError, TransportReply, status_outcome
from ctxprec.scorer.retry import parse_retry_after

_MAX_ERROR_TEXT = 300
MAX_RESPONSE_BYTES = int(JudgeConfig.max_response_mb * 1024 * 1024)  # the setting's default


class OpenAIDirectTransport:
    def __init__(self, *, api_base: str, model: str, api_key: str | None = None, pool_size: int = 100,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, connect_timeout_s: float | None = None) -> None:
        """`model` is the name the server knows (no litellm provider prefix); `api_base` is the URL
        that `/chat/completions` is appended to (e.g. https://api.openai.com/v1). An answer longer
        than `max_response_bytes` is not read past that (`response_too_large`). A new connection
        (TCP and TLS handshakes) must be made within `connect_timeout_s` (the judge timeout),
        whatever the attempt's own timeout allows for the judge's queue."""
        self.url = api_base.rstrip("/") + "/chat/completions"
        self.model = model
        self.secrets: tuple[str, ...] = (api_key,) if api_key else ()
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._pool_size = pool_size
        self._max_response_bytes = max_response_bytes
        self._connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Created on first use: a ClientSession must be made inside the running loop.
        connector = aiohttp.TCPConnector(limit=self._pool_size, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=connector,
            # The client's per-attempt timeout governs; aiohttp's own 5-minute default must not cut in.
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=True,
        )
        return self._session

    async def warm_up(self) -> None:
        """Create the pooled session at start-up rather than on the first scored sample."""
        if self._session is None:
            self._open()

    async def send(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None,
        response_format: dict[str, Any] | None,
        temperature: float,
    ) -> TransportReply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": temperature,
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if response_format is not None:
            body["response_format"] = response_format
        session = self._session or self._open()
        try:
            async with session.post(self.url, data=json.dumps(body).encode(), headers=self._headers) as response:
                status = response.status
                raw = await read_body(response, self._max_response_bytes)
                retry_after = response.headers.get("Retry-After") if status != 200 else None
        except BodyTooLarge as exc:
            # No status for a 200: the answer's length says nothing about the form it was asked in.
            raise AttemptError("response_too_large", f"answer from {self.url} (HTTP {status}): {exc}",
                               status=status if status != 200 else None) from None
        except aiohttp.ServerTimeoutError as exc:
            raise AttemptError("timeout", f"connection to {self.url} not made in time: {exc}") from None
        except aiohttp.ClientError as exc:
            # str(exc) of aiohttp errors names host and port, never our headers.
            raise AttemptError("connection_error", f"connection to {self.url} failed: {type(exc).__name__}: {exc}") from None
        if status != 200:
            raise AttemptError(
                status_outcome(status),
                f"HTTP {status} from {self.url}: {_error_text(raw)}",
                status=status,
                retry_after_s=parse_retry_after(retry_after),
            )
        return parse_reply(raw)

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


def parse_reply(raw: bytes) -> TransportReply:
    """The first choice's content and the usage of an OpenAI chat-completions body."""
    try:
        payload = json.loads(raw)
        choice = payload["choices"][0]
        content = choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise AttemptError("bad_response", f"response is not a chat completion: {_snippet(raw)}") from None
    if not isinstance(content, str) or not content:
        raise AttemptError("bad_response", "response has no text in choices[0].message.content")
    usage = payload.get("usage")
    prompt_tokens = completion_tokens = None
    if isinstance(usage, dict):
        prompt_tokens = _count(usage.get("prompt_tokens"))
        completion_tokens = _count(usage.get("completion_tokens"))
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    return TransportReply(content, prompt_tokens, completion_tokens, finish if isinstance(finish, str) else None)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _snippet(raw: bytes) -> str:
    text = raw[:_MAX_ERROR_TEXT].decode("utf-8", "replace")
    return repr(text) + ("..." if len(raw) > _MAX_ERROR_TEXT else "")


def _error_text(raw: bytes) -> str:
    """The server's error message (OpenAI form {"error": {"message": ...}}) or a body snippet."""
    try:
        payload = json.loads(raw)
        message = payload["error"]["message"] if isinstance(payload.get("error"), dict) else payload["error"]
        if isinstance(message, str):
            return message[:_MAX_ERROR_TEXT]
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return _snippet(raw)
