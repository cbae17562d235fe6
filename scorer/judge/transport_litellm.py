"""The litellm path: every provider that is not plain OpenAI-compatible (anthropic/, ollama_chat/,
bedrock/, ...) goes through litellm.acompletion, one attempt per `send` (litellm's and the
OpenAI SDK's own retries are switched off: LimitedChatClient owns retry policy)."""
from __future__ import annotations

import os
from types import ModuleType
from typing import Any, Sequence

from ctxprec.scorer.judge.chat import ChatMessage
from ctxprec.scorer.judge.client import AttemptError, TransportReply, status_outcome
from ctxprec.scorer.retry import parse_retry_after

_MAX_ERROR_TEXT = 300


def import_litellm() -> ModuleType:
    """Import litellm without its network fetch of the model cost map (nothing may reach
    the network at import), and quiet."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm


class LiteLLMTransport:
    def __init__(self, *, model: str, api_base: str | None = None, api_key: str | None = None) -> None:
        """`model` is the full litellm model string (provider prefix included)."""
        self.model = model
        self.api_base = api_base
        self._api_key = api_key
        self.secrets: tuple[str, ...] = (api_key,) if api_key else ()
        self._litellm: ModuleType | None = None

    async def send(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None,
        response_format: dict[str, Any] | None,
        temperature: float,
    ) -> TransportReply:
        litellm = self._litellm or self._load()
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": temperature,
            "num_retries": 0,
            "max_retries": 0,
        }
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if response_format is not None:
            # litellm maps OpenAI's json_schema form to the providers it knows (a tool call for
            # Anthropic, Gemini's responseSchema, Ollama's format).
            kwargs["response_format"] = response_format
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise _attempt_error(litellm, exc) from None
        try:
            choice = response.choices[0]
            content = choice.message.content
        except (AttributeError, IndexError, TypeError):
            raise AttemptError("bad_response", "response has no choices[0].message") from None
        if not isinstance(content, str) or not content:
            raise AttemptError("bad_response", "response has no text in choices[0].message.content")
        usage = getattr(response, "usage", None)
        finish = getattr(choice, "finish_reason", None)
        return TransportReply(
            content, _count(getattr(usage, "prompt_tokens", None)), _count(getattr(usage, "completion_tokens", None)),
            finish if isinstance(finish, str) else None,
        )

    def prepare(self) -> None:
        """Import litellm before the first attempt's timeout starts (LimitedChatClient calls it)."""
        if self._litellm is None:
            self._load()

    def _load(self) -> ModuleType:
        self._litellm = import_litellm()
        return self._litellm

    async def aclose(self) -> None:
        # litellm keeps module-level clients; nothing of ours to release.
        return None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _attempt_error(litellm: ModuleType, exc: Exception) -> AttemptError:
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    name = type(exc).__name__
    message = f"{name}: {str(exc)[:_MAX_ERROR_TEXT]}"
    if isinstance(exc, litellm.Timeout):
        return AttemptError("timeout", message, status=status)
    if isinstance(exc, litellm.RateLimitError):
        return AttemptError("rate_limited", message, status=429, retry_after_s=_retry_after(exc))
    if isinstance(exc, litellm.APIConnectionError):
        return AttemptError("connection_error", message, status=status)
    if status is not None and status != 200:
        return AttemptError(status_outcome(status), message, status=status, retry_after_s=_retry_after(exc))
    # A 200 whose body litellm could not read, or an error without a status.
    if isinstance(exc, (ValueError, litellm.APIResponseValidationError)):
        return AttemptError("bad_response", message, status=status)
    return AttemptError("server_error", message, status=status)


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        return parse_retry_after(headers.get("retry-after"))
    except Exception:
        return None
