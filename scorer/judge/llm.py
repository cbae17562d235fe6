"""LLMJudge: judges a sample's contexts through a ChatClient with the batched verdict prompt.

One call per sample when it has at most `max_contexts_per_call` contexts, else concurrent
batches that keep the original indices. Cached contexts are not sent. Each call carries the
answer's JSON schema (structured.py; the client sends it in the form the endpoint takes).

An answer that lacks verdicts for some indices is followed by a re-ask for those indices only
(at most two); an answer that is not readable JSON is asked again (at most two retries). A
re-ask says what was wrong (the indices missing, a verdict word that is not yes or no, an
answer cut off at max_tokens), since repeating the request at temperature 0 gets the same
answer; a cut-off answer is asked again with twice the room (up to JudgeConfig.max_tokens) and
a request for terse reasons. If verdicts are still missing the sample fails with
JudgeBadResponse: a missing verdict is never taken for "no".

Every HTTP attempt counts in the sample's usage, and a failure carries the usage so far
(JudgeError.usage), so that a failed sample's record shows what it cost."""
from __future__ import annotations

import asyncio
from typing import Sequence

from ctxprec.scorer.config import JudgeConfig
from ctxprec.scorer.judge.base import JudgeOutcome, truncate
from ctxprec.scorer.judge.cache import CachedVerdict, VerdictCache, verdict_keys
from ctxprec.scorer.judge.shared_cache import SharedVerdictCache
from ctxprec.scorer.judge.chat import ChatClient, ChatResponse, JudgeBadResponse, JudgeError, ChatMessage
from ctxprec.scorer.judge.prompt import (
    PROMPT_VERSION,
    reason_messages,
    verdict_messages,
)
from ctxprec.scorer.judge.structured import REASON_MAX_CHARS, reason_schema, verdict_schema
from ctxprec.scorer.judge.verdicts import (
    MalformedAnswer,
    ParsedVerdict,
    parse_reason,
    parse_verdicts,
)
from ctxprec.scorer.result import JudgeUsage, ReferenceKind, Verdict

MAX_REASKS = 2
MAX_MALFORMED_RETRIES = 2
# Room for one short reason per verdict; a cut-off answer would be unreadable JSON.
_TOKENS_PER_VERDICT = 96
_TOKENS_OVERHEAD = 64
_REASON_MAX_TOKENS = 400


class LLMJudge:
    annotator_kind = "LLM"
    prompt_version = PROMPT_VERSION

    def __init__(self, client: ChatClient, config: JudgeConfig, *, cache: VerdictCache | None = None,
                 shared: SharedVerdictCache | None = None) -> None:
        """`shared`: the verdict cache shared by replicas, asked for what the local one misses."""
        self.client = client
        self.config = config
        self.model = config.model
        self.cache = cache if cache is not None else VerdictCache(config.cache_size)
        self.shared = shared

    async def judge(
        self, query: str, contexts: Sequence[str], *, reference_kind: ReferenceKind, reference: str
    ) -> JudgeOutcome:
        texts, truncated = truncate(contexts, self.config.max_context_chars)
        usage = JudgeUsage(model=self.model, prompt_version=self.prompt_version)
        found: dict[int, Verdict] = {}
        keys = verdict_keys(self.model, self.prompt_version, reference, query, texts)
        to_send: list[tuple[int, str]] = []
        for index, (key, text) in enumerate(zip(keys, texts)):
            hit = self.cache.get(key)
            if hit is None:
                to_send.append((index, text))
            else:
                found[index] = Verdict(index, hit.relevant, hit.reason, cached=True)
        if to_send and self.shared is not None:
            to_send = await self._ask_shared(to_send, keys, found)
        usage.cached_contexts = len(found)

        batches = _split(to_send, self.config.max_contexts_per_call)
        try:
            if len(batches) == 1:
                results = [await self._judge_batch(batches[0], query, reference_kind, reference, usage)]
            elif batches:
                try:
                    async with asyncio.TaskGroup() as group:  # one failed batch cancels the others
                        tasks = [
                            group.create_task(self._judge_batch(batch, query, reference_kind, reference, usage))
                            for batch in batches
                        ]
                except ExceptionGroup as failed:
                    raise failed.exceptions[0] from None
                results = [task.result() for task in tasks]
            else:
                results = []
        except JudgeError as exc:
            exc.usage = usage  # what the sample cost before it failed
            raise
        judged: list[tuple[bytes, CachedVerdict]] = []
        for parsed in results:
            for index, verdict in parsed.items():
                found[index] = Verdict(index, verdict.relevant, verdict.reason)
                cached = CachedVerdict(verdict.relevant, verdict.reason)
                self.cache.put(keys[index], cached)
                judged.append((keys[index], cached))
        if self.shared is not None:
            self.shared.put_many(judged)
        return JudgeOutcome([found[i] for i in range(len(texts))], usage, truncated)

    async def _ask_shared(self, to_send: list[tuple[int, str]], keys: list[bytes],
                          found: dict[int, Verdict]) -> list[tuple[int, str]]:
        """What the shared cache knows of the contexts the local one missed goes into `found` (and
        the local cache); the rest is still to be judged."""
        assert self.shared is not None
        hits = await self.shared.get_many([keys[index] for index, _ in to_send])
        if not hits:
            return to_send
        remaining = []
        for position, (index, text) in enumerate(to_send):
            hit = hits.get(position)
            if hit is None:
                remaining.append((index, text))
                continue
            found[index] = Verdict(index, hit.relevant, hit.reason, cached=True)
            self.cache.put(keys[index], hit)
        return remaining

    async def _judge_batch(
        self,
        items: list[tuple[int, str]],
        query: str,
        reference_kind: ReferenceKind,
        reference: str,
        usage: JudgeUsage,
    ) -> dict[int, ParsedVerdict]:
        texts = dict(items)
        pending = [index for index, _ in items]
        got: dict[int, ParsedVerdict] = {}
        reasks = malformed = 0
        problem: str | None = None
        max_tokens = self._room(len(pending))
        while True:
            messages = verdict_messages(
                query=query,
                reference_kind=reference_kind,
                reference=reference,
                items=[(i, texts[i]) for i in pending],
                problem=problem,
                reason_chars=REASON_MAX_CHARS,
            )
            response = await self._call(messages, max_tokens, verdict_schema(pending), usage)
            cut = response.finish_reason == "length" or response.completion_tokens >= max_tokens
            try:
                parsed = parse_verdicts(response.text, pending)
            except MalformedAnswer as exc:
                malformed += 1
                if malformed > MAX_MALFORMED_RETRIES:
                    raise JudgeBadResponse(
                        f"judge {self.model} answered {malformed} times without readable verdict JSON "
                        f"for context indices {pending}: {exc}"
                    ) from None
                if cut:
                    problem = (f"it was cut off at {max_tokens} tokens before the JSON ended. Keep each reason "
                               "to a few words.")
                    max_tokens = self._more_room(max_tokens, len(pending))
                else:
                    problem = f"it was not the JSON object asked for ({exc})."
                continue
            got.update(parsed.verdicts)
            if not parsed.unresolved:
                return got
            reasks += 1
            if reasks > MAX_REASKS:
                raise JudgeBadResponse(
                    f"judge {self.model} gave no valid verdict for context indices {parsed.unresolved} "
                    f"after {MAX_REASKS} re-asks (last answer: {parsed.describe()}); no score is made up"
                )
            pending = parsed.unresolved
            problem = parsed.problem()
            if cut:
                problem += f" It was cut off at {max_tokens} tokens: keep each reason to a few words."
                max_tokens = self._more_room(max_tokens, len(pending))
            else:
                max_tokens = self._room(len(pending))

    async def _call(
        self, messages: list[ChatMessage], max_tokens: int, schema: dict[str, object], usage: JudgeUsage
    ) -> ChatResponse:
        """One judge call; every attempt it made counts in `usage`, a failed one's too."""
        try:
            response = await self.client.complete(messages, max_tokens=max_tokens, json_mode=True, schema=schema)
        except JudgeError as exc:
            usage.calls += exc.attempts
            raise
        usage.add_call(response.prompt_tokens, response.completion_tokens, response.cost_usd, response.latency_ms,
                       calls=response.attempts)
        return response

    def _room(self, count: int) -> int:
        """max_tokens for `count` verdicts: one short reason each."""
        return min(self.config.max_tokens, _TOKENS_OVERHEAD + _TOKENS_PER_VERDICT * count)

    def _more_room(self, current: int, count: int) -> int:
        return min(self.config.max_tokens, max(2 * current, self._room(count)))

    async def explain(
        self,
        *,
        query: str,
        reference_kind: ReferenceKind,
        reference: str,
        score: float,
        verdicts: Sequence[Verdict],
        usage: JudgeUsage,
    ) -> str | None:
        if self.config.reason_mode != "llm":
            return None
        messages = reason_messages(
            query=query,
            reference_kind=reference_kind,
            reference=reference,
            score=score,
            verdicts=[v.to_dict() for v in verdicts],
        )
        last_error = ""
        for _ in range(1 + MAX_MALFORMED_RETRIES):
            response = await self._call(messages, min(self.config.max_tokens, _REASON_MAX_TOKENS), reason_schema(),
                                        usage)
            try:
                return parse_reason(response.text)
            except MalformedAnswer as exc:
                last_error = str(exc)
        # The score stands on the verdicts alone; the engine falls back to the template reason.
        raise ReasonUnavailable(f"judge {self.model} gave no readable reason: {last_error}")

    async def warm_up(self) -> None:
        warm = getattr(self.client, "warm_up", None)
        if warm is not None:
            await warm()

    async def aclose(self) -> None:
        try:
            await self.client.aclose()
        finally:
            if self.shared is not None:
                await self.shared.aclose()


class ReasonUnavailable(Exception):
    """reason_mode="llm" got no usable reason; the verdicts (and so the score) are still good."""


def _split(items: list[tuple[int, str]], size: int) -> list[list[tuple[int, str]]]:
    """Even batches of at most `size` (11 items at size 10 -> 6 + 5, not 10 + 1)."""
    if not items:
        return []
    count = -(-len(items) // size)
    base, extra = divmod(len(items), count)
    out, start = [], 0
    for b in range(count):
        end = start + base + (1 if b < extra else 0)
        out.append(items[start:end])
        start = end
    return out
