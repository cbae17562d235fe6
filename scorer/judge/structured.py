"""Structured outputs: the JSON schema of the judge's answer and the `response_format` forms a
server may take it in, and which form a judge endpoint takes.

Without a schema, small models answer JSON of the wrong shape (bare indices, `text` for
`verdict`, 1-based indices) or cut off at max_tokens; with one, a server that decodes under the
schema's grammar can only write a usable answer. Servers differ in how they take it:

- `json_schema`: OpenAI's form, `{"type": "json_schema", "json_schema": {"name", "strict", "schema"}}`
  (OpenAI, vLLM, LM Studio, Ollama's OpenAI endpoint, llama.cpp's own server; litellm maps it to
  the providers it knows);
- `json_object_schema`: `{"type": "json_object", "schema": {...}}`, the form llama-cpp-python's
  server takes (its response format allows `text` or `json_object` with an optional schema, and
  answers `json_schema` with HTTP 500);
- `json_object`: JSON without a schema;
- `off`: no `response_format` at all (servers that reject every form).

`FormChooser` settles the form once per endpoint: with `auto`, the best form until the endpoint
answers it; on a 400, 422 or 500 (whatever the body says) small probes find the best form the
endpoint takes, the step down is logged once and remembered."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Sequence

log = logging.getLogger("ctxprec.judge")

FORMS = ("json_schema", "json_object_schema", "json_object", "off")
# The statuses that say "not this form" when they answer a probe (llama-cpp-python answers an
# unknown response_format type with 500, FastAPI servers with 422, others with 400).
REJECTING_STATUSES = frozenset({400, 422, 500})
# Reasons are asked for in one short sentence; the cap keeps a model from copying the context in.
REASON_MAX_CHARS = 120


def verdict_schema(indices: Sequence[int], reason_chars: int = REASON_MAX_CHARS) -> dict[str, Any]:
    """One entry per index asked for, in order: `context_index` fixed, `verdict` yes or no, a
    capped `reason`. `prefixItems` pins each entry to its index, so under a grammar the model
    cannot skip, repeat, renumber or add an index."""
    items = [
        {
            "type": "object",
            "properties": {
                "context_index": {"type": "integer", "const": index},
                "verdict": {"type": "string", "enum": ["yes", "no"]},
                "reason": {"type": "string", "maxLength": reason_chars},
            },
            "required": ["context_index", "verdict", "reason"],
            "additionalProperties": False,
        }
        for index in indices
    ]
    return {
        "type": "object",
        "properties": {
            "verdicts": {"type": "array", "prefixItems": items, "items": False,
                         "minItems": len(items), "maxItems": len(items)},
        },
        "required": ["verdicts"],
        "additionalProperties": False,
    }


def reason_schema(max_chars: int = 800) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"reason": {"type": "string", "maxLength": max_chars}},
        "required": ["reason"],
        "additionalProperties": False,
    }


def response_format(form: str, schema: dict[str, Any] | None, *, name: str = "judge_answer") -> dict[str, Any] | None:
    """The `response_format` body of `form` for `schema` (None: JSON without a schema)."""
    if form == "off":
        return None
    if schema is None or form == "json_object":
        return {"type": "json_object"}
    if form == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}
    if form == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    raise ValueError(f"unknown structured output form {form!r}")


# A probe's answer: the HTTP status, or None when the attempt proved nothing about the form.
Probe = Callable[[str], Awaitable[int | None]]


class FormChooser:
    """Which form one judge endpoint takes. `setting` is JudgeConfig.structured_output: a form
    (used as given) or auto: the forms in FORMS order, best first, settled by the answers.

    With auto, calls go out in the form on trial; the first usable answer settles it (no extra
    request for the endpoints that take the best form). When a call in the form on trial is
    answered 400, 422 or 500, the status may be about the request rather than the form (a prompt
    over the context window is a 400 too), so small probes decide: the form on trial, then each
    lower one, until one is answered 200. That one is settled (a step down is logged once) and
    the call goes again in it at once. If no probe gets a 200 (the server is down, or rejects
    everything), nothing is settled, the call fails as it would have, and there is no new round
    of probes for RESWEEP_S: a judge that is down never talks us out of the best form."""

    RESWEEP_S = 60.0

    def __init__(self, setting: str, *, model: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._model = model
        self._candidates = list(FORMS) if setting == "auto" else [setting]
        self.settled = setting != "auto"
        self._clock = clock
        self._lock = asyncio.Lock()
        self._next_sweep = 0.0
        self._in_doubt = 0  # answers rejecting the form on trial, whose sweep has not ended
        self._doubt_over = asyncio.Event()
        self._doubt_over.set()

    @property
    def form(self) -> str:
        """The form on trial, or the settled one."""
        return self._candidates[0]

    def doubt(self, form: str, status: int) -> bool:
        """An answer in `form` was `status`. True when that puts the form in doubt: the caller
        must then call `rejected`, and until it has, calls wait in `sweep_done` rather than go
        out in a form that may be refused."""
        if self.settled or status not in REJECTING_STATUSES or self._clock() < self._next_sweep:
            return False
        self._in_doubt += 1
        self._doubt_over.clear()
        return True

    @property
    def in_doubt(self) -> bool:
        return self._in_doubt > 0

    async def sweep_done(self) -> None:
        """Wait while probes are deciding the form (calls then go out in the one they found)."""
        await self._doubt_over.wait()

    def accepted(self, form: str) -> None:
        """A call in `form` was answered 200."""
        if not self.settled and form == self.form:
            self.settled = True

    async def rejected(self, form: str, status: int, probe: Probe) -> bool:
        """A call in `form` was answered `status` and `doubt` said so. True when the call should
        go again at once, in `self.form`; False when the error stands."""
        try:
            return await self._sweep(form, status, probe)
        finally:
            self._in_doubt -= 1
            if not self._in_doubt:
                self._doubt_over.set()

    async def _sweep(self, form: str, status: int, probe: Probe) -> bool:
        if self.settled:
            return False
        async with self._lock:
            if self.settled or form != self.form:
                return form != self.form  # another call settled it meanwhile
            if self._clock() < self._next_sweep:
                return False
            for position, candidate in enumerate(self._candidates):
                answer = await probe(candidate)
                if answer is not None and answer < 300:
                    self._settle(position, status)
                    return candidate != form
                if answer is None or answer not in REJECTING_STATUSES:
                    break  # proved nothing (a timeout, a 429, a 401): keep the form on trial
            self._next_sweep = self._clock() + self.RESWEEP_S
            return False

    def _settle(self, position: int, status: int) -> None:
        if position:
            log.warning("judge %s: the endpoint rejected response_format form %s (HTTP %d, and a probe in it); "
                        "using %s from now on", self._model, self.form, status, self._candidates[position])
        del self._candidates[:position]
        self.settled = True
