"""The library's front door: create_context_precision_scorer(...).run(...).

It resolves the context (a fixed list, or `context_extractor(input, output)`, which wins when
both are given), reads the query out of a string or chat messages, and hands over to the engine."""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable, Sequence, Union

from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.engine import ContextPrecisionEngine, build_engine
from ctxprec.scorer.judge.chat import RequestObserver
from ctxprec.scorer.precision import validate_scale
from ctxprec.scorer.result import ScoreResult

ContextExtractor = Callable[[Any, Any], Union[Sequence[Any], Awaitable[Sequence[Any]]]]


class ContextPrecisionScorer:
    def __init__(
        self,
        engine: ContextPrecisionEngine,
        *,
        context: Sequence[str] | None = None,
        context_extractor: ContextExtractor | None = None,
    ) -> None:
        self.engine = engine
        self.context = list(context) if context is not None else None
        self.context_extractor = context_extractor
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def fingerprint(self) -> str:
        return self.engine.fingerprint

    async def run(self, input: Any, output: Any = None, expected_output: Any = None) -> ScoreResult:
        # Bad input is reported before any user code (the extractor) or judge call runs.
        query = query_text(input)
        output_text = answer_text(output, "output")
        expected_text = answer_text(expected_output, "expected_output")
        contexts = await self._contexts(input, output)
        return await self.engine.score(query, contexts, output=output_text, expected_output=expected_text)

    def run_sync(self, input: Any, output: Any = None, expected_output: Any = None) -> ScoreResult:
        """For scripts. Reuses one private event loop so that pooled connections stay valid."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("run_sync() cannot be called from a running event loop; use `await scorer.run(...)`")
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self.run(input, output, expected_output))

    async def aclose(self) -> None:
        await self.engine.aclose()

    def close(self) -> None:
        """Release the judge's connections after run_sync() use."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.run_until_complete(self.engine.aclose())
            self._loop.close()
        self._loop = None

    async def _contexts(self, input: Any, output: Any) -> list[str]:
        if self.context_extractor is not None:
            got = self.context_extractor(input, output)
            if inspect.isawaitable(got):
                got = await got
            return _context_list(got, "context_extractor result")
        return list(self.context or [])


def create_context_precision_scorer(
    model: str = "local",
    *,
    context: Sequence[str] | None = None,
    context_extractor: ContextExtractor | None = None,
    scale: float = 1,
    observer: RequestObserver | None = None,
    **judge_options: Any,
) -> ContextPrecisionScorer:
    """`judge_options` are JudgeConfig fields (api_base, reason_mode, max_contexts_per_call, ...)."""
    if context is None and context_extractor is None:
        raise ValueError("Either context or context_extractor is required for context precision scoring")
    if context_extractor is not None and not callable(context_extractor):
        raise ValueError("context_extractor: must be a callable (input, output) -> list of strings")
    if context_extractor is None:
        if isinstance(context, (str, bytes)) or not isinstance(context, Sequence):
            raise ValueError("context: must be a list of strings")
        if len(context) == 0:
            raise ValueError("Context array cannot be empty if provided")
        context = _context_list(context, "context")
    validate_scale(scale)
    known = set(JudgeConfig.__dataclass_fields__)
    unknown = sorted(set(judge_options) - known)
    if unknown:
        raise ValueError(f"unknown judge option(s) {', '.join(unknown)}; expected JudgeConfig fields: {', '.join(sorted(known - {'model'}))}")
    config = JudgeConfig(model=model, **judge_options)
    engine = build_engine(config, scale=scale, observer=observer)
    return ContextPrecisionScorer(engine, context=context, context_extractor=context_extractor)


def _context_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{what}: must be a list of strings, got {type(value).__name__}")
    out: list[str] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and isinstance(item.get("content", item.get("text")), str):
            out.append(item.get("content", item.get("text")))
        else:
            raise ValueError(f"{what}: item {i} must be a string (or a dict with a 'content' string), got {type(item).__name__}")
    return out


def _message_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI-style content parts
        texts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(texts) if texts else None
    return None


def query_text(input: Any) -> str:
    """The query: a string as is; for chat messages, the first user message's content (as
    `input.inputMessages[0].content` in chat-style inputs)."""
    if isinstance(input, str):
        return input
    messages: Any = None
    if isinstance(input, dict):
        if "inputMessages" in input:
            messages = input["inputMessages"]
        elif "messages" in input:
            messages = input["messages"]
        elif "content" in input:
            messages = [input]
        elif isinstance(input.get("query"), str):
            return input["query"]
    elif isinstance(input, list):
        messages = input
    if isinstance(messages, list):
        dicts = [m for m in messages if isinstance(m, dict)]
        users = [m for m in dicts if m.get("role") == "user"] or [m for m in dicts if "role" not in m]
        for message in users[:1]:
            text = _message_text(message.get("content"))
            if text is not None:
                return text
    raise ValueError(
        "input: must be the query string or chat messages with a user message whose content is text "
        f"(got {type(input).__name__})"
    )


def answer_text(value: Any, what: str) -> str | None:
    """output / expected_output as text: a string, a message dict ("content" or "text"), or a list
    of messages (the last assistant message). A dict or list without text (e.g. an agent result
    that only carries metadata for the extractor) gives None: the reference then falls back, and
    the result's reference_kind shows which text was used."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("content", "text"):
            text = _message_text(value.get(key))
            if text is not None:
                return text
        return None
    if isinstance(value, list):
        messages = [m for m in value if isinstance(m, dict)]
        assistants = [m for m in messages if m.get("role") == "assistant"] or messages
        for message in reversed(assistants):
            text = _message_text(message.get("content"))
            if text is not None:
                return text
        return None
    raise ValueError(f"{what}: must be a string, a message dict or a list of messages, got {type(value).__name__}")
