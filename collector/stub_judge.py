"""`ctxprec stub-judge`: an OpenAI-compatible chat-completions server that judges deterministically.

It stands in for a real LLM judge in dry runs, tests and benchmarks, and it speaks the same wire
as OpenAI (`POST /v1/chat/completions`, also `/chat/completions`; `GET /v1/models`), so the real
judge client talks to it over real HTTP.

Reading the request: the last user message carries the sample as one line of JSON between the
lines `BEGIN_DATA` and `END_DATA` (docs/INTERNALS.md). A request without a readable data block
gets HTTP 400 with an OpenAI-style error body.

The relevance rule (task "verdicts"), applied to each context asked for:

1. A context whose text contains the marker `[irrelevant]` is judged "no"; otherwise one that
   contains `[relevant]` is judged "yes". Markers let tests pin any verdict pattern.
2. Otherwise the context is relevant iff it shares at least one *content word* with the
   reference text (the query when `reference_kind` is "query", or when the reference is empty).
   A content word is a lowercase alphanumeric token (`[a-z0-9]+` after lowercasing) of 4 or more
   characters that is not in the small stopword list `STOPWORDS` below.

The answer is `{"verdicts": [{"context_index": i, "verdict": "yes"|"no", "reason": "..."}]}` for
exactly the indices asked, in the order asked. For task "reason" the answer is
`{"reason": "The score is <score> because ..."}` built from the request's `score` and `verdicts`.

Usage: `prompt_tokens = ceil(characters of all message contents / 4)` and `completion_tokens =
ceil(characters of the answer content / 4)`. Cost is not the stub's business: its model name is
unknown to litellm's cost map.

Latency: every answer waits `latency_ms` plus a uniform `0..jitter_ms`. Faults: with probability
`error_rate` a request gets one fault picked uniformly from `fault_kinds`:

- `rate_limit`: HTTP 429 with a `Retry-After` header (`retry_after_s`; fractional values are
  written as such, which clients that parse floats honour);
- `server_error`: HTTP 500;
- `timeout`: the request is held `hang_s` seconds (default 30) and then answered normally;
  stopping the server releases held requests with HTTP 503;
- `malformed`: HTTP 200 whose message content is not JSON;
- `wrong_count`: a verdicts answer with one verdict missing or one index duplicated (reason
  tasks have no count, so they are answered normally and no fault is counted);
- `wrong_shape`: a verdicts answer in a shape small models write without a schema, picked in
  turn: a list of bare indices, `text` where `verdict` should be, indices as strings;
- `one_based`: a verdicts answer whose indices count from 1.

Like a model decoding under a grammar, the stub never gives `wrong_shape` or `one_based` answers
to a request that carries a JSON schema in a form it takes (below); they are not counted then.

Real servers, modelled by settings (what the judge client must survive, from real model servers):

- `slots`: how many requests are judged at once (0: no limit). With 1 the stub serves one at a
  time, as llama.cpp's and llama-cpp-python's servers do: the others wait in its queue (their
  latency grows with the requests ahead), and a queued request whose client has gone is dropped
  unanswered, as llama-cpp-python drops it. `latency_ms` is each request's own work.
- `reject_forms` / `reject_status`: response_format forms (json_schema, json_object_schema,
  json_object, off) answered with that status (llama-cpp-python answers json_schema with 500);
- `verbose_reasons`: every reason copies its context in, as small models do; without a schema
  the answer then runs past `max_tokens` and is cut there (finish_reason `length`); a schema's
  `maxLength` on reason caps it.
- `huge_answer_mb`: every chat answer is HTTP 200 streaming that many MB of one JSON document
  that never ends (a broken or hostile server; the client must stop reading at its own bound).

`max_tokens` is honoured for every answer: content past `max_tokens * 4` characters is cut and
the choice's finish_reason is `length`.

A changed judge, modelled (the canary's tests and benchmark): `flip_rate` turns the verdict of
that share of contexts around, always the same contexts (those whose text hashes, with
`flip_salt`, below the rate), as a hosted model updated behind the same name answers some
inputs differently from then on; `noise_rate` turns a verdict around at random with that
probability on every answer, the run-to-run variation of a model judge sampled at temperature 0.

`seed` makes the fault and jitter draws reproducible for a given request order. `GET /stats`
returns the counters (requests, responses by status, faults by kind, tokens); `POST /control`
with a JSON object changes latency and fault settings at run time (chaos tests) and
`{"reset_stats": true}` zeroes the counters. `GET /healthz` answers `ok`.

In-process use (tests): `stub = StubJudge(StubSettings(...)); await stub.start(); stub.url`
(ends in `/v1`); `await stub.stop()`. Own process: `python -m ctxprec.collector.stub_judge --port P`.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import random
import re
import signal
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from aiohttp import web

from ctxprec.scorer.batch import flag_type
from ctxprec.scorer.values import parse_count0, parse_non_negative, parse_rate
from ctxprec.scorer.judge.prompt import BEGIN_DATA, END_DATA

FAULT_KINDS: tuple[str, ...] = ("rate_limit", "server_error", "timeout", "malformed", "wrong_count")
# Faults of a model writing without a schema; not in FAULT_KINDS' default (they need asking for).
SHAPE_FAULTS: tuple[str, ...] = ("wrong_shape", "one_based")
ALL_FAULTS = FAULT_KINDS + SHAPE_FAULTS
FORMS: tuple[str, ...] = ("json_schema", "json_object_schema", "json_object", "off")
DEFAULT_MODEL = "ctxprec-stub-judge"

STOPWORDS = frozenset(
    """
    about above after again against also because been before being below between both cannot
    could does doing down during each from further have having here hers herself himself into
    itself just more most myself other ours ourselves over same should some such than that their
    theirs them themselves then there these they this those through under until very were what
    when where which while whom with would your yours yourself yourselves will shall into onto
    upon only many much like make made want need using used here what
    """.split()
)

_WORD_RE = re.compile(r"[a-z0-9]+")


def content_words(text: str) -> set[str]:
    """The stub's notion of a content word (see the module docstring)."""
    return {w for w in _WORD_RE.findall(text.lower()) if len(w) >= 4 and w not in STOPWORDS}


def judge_context(text: str, reference_words: set[str]) -> tuple[bool, str]:
    """Apply the deterministic relevance rule to one context; returns (relevant, reason)."""
    if "[irrelevant]" in text:
        return False, "The context is marked [irrelevant]."
    if "[relevant]" in text:
        return True, "The context is marked [relevant]."
    shared = sorted(content_words(text) & reference_words)
    if shared:
        return True, "The context shares the words " + ", ".join(shared[:5]) + " with the reference."
    return False, "The context shares no content word with the reference."


@dataclass
class StubSettings:
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    error_rate: float = 0.0
    fault_kinds: tuple[str, ...] = FAULT_KINDS
    hang_s: float = 30.0
    retry_after_s: float = 1.0
    seed: int | None = None
    model: str = DEFAULT_MODEL
    api_key: str | None = None  # when set, requests must carry "Authorization: Bearer <api_key>"
    slots: int = 0  # requests judged at once; 0: no limit
    reject_forms: tuple[str, ...] = ()
    reject_status: int = 500
    verbose_reasons: bool = False
    huge_answer_mb: float = 0.0  # > 0: every answer streams this many MB of an unfinished document
    flip_rate: float = 0.0  # share of contexts (picked by a hash of their text) always answered the other way
    flip_salt: str = ""  # which contexts flip_rate picks
    noise_rate: float = 0.0  # probability that any verdict is turned around, drawn afresh on every answer

    def __post_init__(self) -> None:
        self.fault_kinds = tuple(self.fault_kinds)
        self.reject_forms = tuple(self.reject_forms)
        self.validate()

    def validate(self) -> None:
        for name in ("latency_ms", "jitter_ms", "hang_s", "retry_after_s", "huge_answer_mb"):
            value = getattr(self, name)
            if not _is_number(value) or value < 0:
                raise ValueError(f"{name}: must be a number >= 0, got {value!r}")
        for name in ("error_rate", "flip_rate", "noise_rate"):
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: must be a number between 0 and 1, got {value!r}")
        if not isinstance(self.flip_salt, str):
            raise ValueError(f"flip_salt: must be a string, got {self.flip_salt!r}")
        unknown = [k for k in self.fault_kinds if k not in ALL_FAULTS]
        if unknown or not self.fault_kinds:
            raise ValueError(
                f"fault_kinds: must be a non-empty subset of {', '.join(ALL_FAULTS)}, got {list(self.fault_kinds)!r}"
            )
        if not isinstance(self.slots, int) or isinstance(self.slots, bool) or self.slots < 0:
            raise ValueError(f"slots: must be an integer >= 0, got {self.slots!r}")
        bad_forms = [f for f in self.reject_forms if f not in FORMS]
        if bad_forms:
            raise ValueError(f"reject_forms: must be a subset of {', '.join(FORMS)}, got {list(self.reject_forms)!r}")
        if self.reject_status not in (400, 422, 500):
            raise ValueError(f"reject_status: must be 400, 422 or 500, got {self.reject_status!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise ValueError(f"seed: must be an integer, got {self.seed!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class StubStats:
    requests: int = 0
    responses: dict[int, int] = field(default_factory=dict)  # HTTP status -> count
    faults: dict[str, int] = field(default_factory=dict)  # fault kind -> count
    prompt_tokens: int = 0
    completion_tokens: int = 0
    forms: dict[str, int] = field(default_factory=dict)  # response_format form -> requests
    max_in_flight: int = 0  # the most requests being judged at once
    max_queued: int = 0  # with slots: the most requests held at once, judged or waiting
    dropped: int = 0  # queued requests whose client had gone (slots)
    cut: int = 0  # answers cut at max_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "responses": {str(k): v for k, v in sorted(self.responses.items())},
            "faults": dict(sorted(self.faults.items())),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "forms": dict(sorted(self.forms.items())),
            "max_in_flight": self.max_in_flight,
            "max_queued": self.max_queued,
            "dropped": self.dropped,
            "cut": self.cut,
        }


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """What a client sent, kept (last 256) so tests can check the wire without a proxy."""

    path: str
    body: dict[str, Any] | None
    authorization: str | None


class BadRequest(Exception):
    pass


def _tokens(chars: int) -> int:
    return -(-chars // 4)


def parse_data_block(messages: Any) -> dict[str, Any]:
    """Find the BEGIN_DATA/END_DATA JSON line in the last user message that has one."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: must be a non-empty list")
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if not isinstance(content, str):
            continue
        start = content.rfind(BEGIN_DATA + "\n")
        if start < 0:
            continue
        line_start = start + len(BEGIN_DATA) + 1
        line_end = content.find("\n", line_start)
        if line_end < 0 or not content.startswith(END_DATA, line_end + 1):
            raise BadRequest("data block: the JSON line after BEGIN_DATA must be followed by a line END_DATA")
        try:
            data = json.loads(content[line_start:line_end])
        except ValueError as exc:
            raise BadRequest(f"data block: not valid JSON ({exc})") from None
        except RecursionError:
            raise BadRequest("data block: JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise BadRequest("data block: must be a JSON object")
        return data
    raise BadRequest("messages: no user message carries a BEGIN_DATA/END_DATA block")


def flipped(text: str, rate: float, salt: str = "") -> bool:
    """Whether `flip_rate` turns this context's verdict around: the same answer for the same text
    every time (a changed judge is consistent), for about `rate` of all texts."""
    if rate <= 0.0:
        return False
    digest = hashlib.sha256((salt + "\x00" + text).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < rate


def answer_verdicts(data: dict[str, Any]) -> list[dict[str, Any]]:
    contexts = data.get("contexts")
    if not isinstance(contexts, list):
        raise BadRequest("data block: contexts must be a list")
    query = data.get("query") if isinstance(data.get("query"), str) else ""
    reference = data.get("reference") if isinstance(data.get("reference"), str) else ""
    if data.get("reference_kind") == "query" or not reference:
        reference = query
    reference_words = content_words(reference)
    verdicts = []
    for item in contexts:
        if not isinstance(item, dict) or not isinstance(item.get("context_index"), int) or not isinstance(
            item.get("text"), str
        ):
            raise BadRequest("data block: each context must be {\"context_index\": int, \"text\": str}")
        relevant, reason = judge_context(item["text"], reference_words)
        verdicts.append({"context_index": item["context_index"], "verdict": "yes" if relevant else "no", "reason": reason})
    return verdicts


def request_form(body: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The response_format form of a request and the JSON schema it carries, if any."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return "off", None
    if fmt.get("type") == "json_schema":
        inner = fmt.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, dict) else None
        return "json_schema", schema if isinstance(schema, dict) else None
    if fmt.get("type") == "json_object":
        schema = fmt.get("schema")
        return ("json_object_schema", schema) if isinstance(schema, dict) else ("json_object", None)
    return "off", None


def reason_cap(schema: dict[str, Any] | None) -> int | None:
    """The maxLength the schema puts on a verdict's reason."""
    try:
        items = schema["properties"]["verdicts"]["prefixItems"]  # type: ignore[index]
        return int(items[0]["properties"]["reason"]["maxLength"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def misshape(verdicts: list[dict[str, Any]], turn: int) -> list[Any]:
    """Verdicts in one of the wrong shapes seen from small models (turn picks which)."""
    kind = turn % 3
    if kind == 0:  # the relevant indices only, bare
        return [v["context_index"] for v in verdicts if v["verdict"] == "yes"] or [verdicts[0]["context_index"]]
    if kind == 1:  # "text" where "verdict" should be
        return [{"context_index": v["context_index"], "text": v["verdict"], "reason": v["reason"]} for v in verdicts]
    return [{**v, "context_index": str(v["context_index"])} for v in verdicts]  # indices as strings


def answer_reason(data: dict[str, Any]) -> str:
    score = data.get("score")
    verdicts = data.get("verdicts") if isinstance(data.get("verdicts"), list) else []
    relevant: list[int] = []
    for position, item in enumerate(verdicts):
        if not isinstance(item, dict):
            continue
        flag = item.get("relevant")
        if flag is None:
            flag = str(item.get("verdict", "")).strip().lower() == "yes"
        if flag:
            index = item.get("index", item.get("context_index", position))
            relevant.append(index + 1 if isinstance(index, int) else position + 1)
    if relevant:
        ranks = ", ".join(str(r) for r in relevant)
        why = f"the contexts ranked {ranks} of {len(verdicts)} were judged relevant"
    else:
        why = f"none of the {len(verdicts)} contexts was judged relevant"
    return f"The score is {score} because {why}."


class StubJudge:
    def __init__(self, settings: StubSettings | None = None) -> None:
        self.settings = settings or StubSettings()
        self.stats = StubStats()
        self.recent: deque[RecordedRequest] = deque(maxlen=256)
        self._rng = random.Random(self.settings.seed)
        # Its own stream, so that noise does not move the fault and jitter draws of a seeded run.
        self._noise = random.Random(None if self.settings.seed is None else self.settings.seed + 1)
        self._slots: asyncio.Semaphore | None = None
        self._slot_count = 0
        self._in_flight = 0
        self._held = 0  # with slots: requests judged or waiting for a slot
        self._shape_turn = 0
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self.host = "127.0.0.1"
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def configure(self, **changes: Any) -> StubSettings:
        """Change settings at run time (also what POST /control does). Validated as a whole."""
        known = {f.name for f in fields(StubSettings)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown setting(s): {', '.join(unknown)}")
        for name in ("fault_kinds", "reject_forms"):
            if isinstance(changes.get(name), str):
                changes[name] = tuple(k.strip() for k in changes[name].split(",") if k.strip())
        merged = StubSettings(**{**asdict(self.settings), **changes})
        self.settings = merged
        if "seed" in changes:
            self._rng = random.Random(merged.seed)
            self._noise = random.Random(None if merged.seed is None else merged.seed + 1)
        return merged

    def reset_stats(self) -> None:
        # In place, so that a reference a test already holds sees the reset.
        fresh = StubStats()
        for f in fields(StubStats):
            setattr(self.stats, f.name, getattr(fresh, f.name))

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/stats", self._stats)
        app.router.add_post("/control", self._control)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._stopping = asyncio.Event()
        # No access log: it would cost more CPU per request than the judging itself.
        self._runner = web.AppRunner(self._app(), access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=2048, shutdown_timeout=1.0)
        await site.start()
        server = site._server  # the bound port is only known after binding (port 0)
        sockets = getattr(server, "sockets", None) or []
        self.host = host
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> "StubJudge":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- handlers -------------------------------------------------------------------------

    def _respond(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
        self.stats.responses[status] = self.stats.responses.get(status, 0) + 1
        return web.Response(status=status, text=json.dumps(payload), content_type="application/json", headers=headers)

    def _error(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> web.Response:
        return self._respond(status, {"error": {"message": message, "type": kind, "code": status}}, headers)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.stats.requests += 1
        settings = self.settings
        authorization = request.headers.get("Authorization")
        try:
            body = await request.json()
        except ValueError:
            self.recent.append(RecordedRequest(request.path, None, authorization))
            return self._error(400, "request body is not valid JSON", "invalid_request_error")
        self.recent.append(RecordedRequest(request.path, body if isinstance(body, dict) else None, authorization))
        if settings.api_key is not None and authorization != f"Bearer {settings.api_key}":
            return self._error(401, "invalid or missing API key", "authentication_error")
        if not isinstance(body, dict):
            return self._error(400, "request body must be a JSON object", "invalid_request_error")
        form, schema = request_form(body)
        self.stats.forms[form] = self.stats.forms.get(form, 0) + 1
        if form in settings.reject_forms:
            return self._error(settings.reject_status, f"response_format form {form} is not supported",
                               "invalid_request_error")
        if settings.huge_answer_mb:
            return await self._huge(request, int(settings.huge_answer_mb * 1024 * 1024))
        if settings.slots:
            return await self._queued(request, body, form, schema)
        return await self._judge(body, form, schema)

    async def _huge(self, request: web.Request, size: int) -> web.StreamResponse:
        """`size` bytes of a chat completion that never closes its JSON, streamed in 1 MB writes,
        until sent or the client hangs up."""
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        block = b'{"choices": [' + b" " * (1024 * 1024 - 13)
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < size:
                await response.write(block[:size - sent])
                sent += len(block)
        self.stats.responses[200] = self.stats.responses.get(200, 0) + 1
        return response

    async def _queued(self, request: web.Request, body: dict[str, Any], form: str,
                      schema: dict[str, Any] | None) -> web.Response:
        """One of `slots` requests judged at a time; the others wait here, as in a model server."""
        if self._slots is None or self._slot_count != self.settings.slots:
            self._slots, self._slot_count = asyncio.Semaphore(self.settings.slots), self.settings.slots
        self._held += 1
        self.stats.max_queued = max(self.stats.max_queued, self._held)
        try:
            async with self._slots:
                transport = request.transport
                if transport is None or transport.is_closing():
                    self.stats.dropped += 1  # the client gave up while it waited: nobody to answer
                    return self._error(499, "client closed the request", "client_closed")
                return await self._judge(body, form, schema)
        except asyncio.CancelledError:
            self.stats.dropped += 1  # the client went away (aiohttp cancels the handler)
            raise
        finally:
            self._held -= 1

    async def _judge(self, body: dict[str, Any], form: str, schema: dict[str, Any] | None) -> web.Response:
        self._in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self._in_flight)
        try:
            return await self._answer(body, form, schema)
        finally:
            self._in_flight -= 1

    async def _answer(self, body: dict[str, Any], form: str, schema: dict[str, Any] | None) -> web.Response:
        settings = self.settings
        messages = body.get("messages")
        try:
            data = parse_data_block(messages)
            task = data.get("task", "verdicts")
            if task == "verdicts":
                verdicts = self._changed(answer_verdicts(data), data)
                answer: dict[str, Any] = {"verdicts": verdicts}
            elif task == "reason":
                answer = {"reason": answer_reason(data)}
            else:
                raise BadRequest(f"data block: unknown task {task!r}")
        except BadRequest as exc:
            return self._error(400, str(exc), "invalid_request_error")

        fault = None
        if settings.error_rate > 0 and self._rng.random() < settings.error_rate:
            fault = self._rng.choice(settings.fault_kinds)
            if fault in ("wrong_count", *SHAPE_FAULTS) and task != "verdicts":
                fault = None
            if fault in SHAPE_FAULTS and schema is not None:
                fault = None  # a grammar would not have let the model write it
        delay = settings.latency_ms + (self._rng.uniform(0, settings.jitter_ms) if settings.jitter_ms else 0.0)
        if delay > 0:
            await asyncio.sleep(delay / 1000.0)
        if fault is not None:
            self.stats.faults[fault] = self.stats.faults.get(fault, 0) + 1
        if fault == "rate_limit":
            retry_after = settings.retry_after_s
            header = str(int(retry_after)) if float(retry_after).is_integer() else f"{retry_after:g}"
            return self._error(429, "stub injected rate limit", "rate_limit_error", {"Retry-After": header})
        if fault == "server_error":
            return self._error(500, "stub injected server error", "server_error")
        if fault == "timeout":
            try:
                await asyncio.wait_for(self._stopping.wait(), settings.hang_s)
                return self._error(503, "stub judge is stopping", "server_error")
            except asyncio.TimeoutError:
                pass
        if fault == "wrong_count":
            verdicts = list(answer["verdicts"])
            if len(verdicts) > 1 and self._rng.random() < 0.5:
                verdicts.append(dict(verdicts[0]))  # a duplicate index
            elif verdicts:
                verdicts.pop(self._rng.randrange(len(verdicts)))  # one index missing
            answer = {"verdicts": verdicts}
        if task == "verdicts" and settings.verbose_reasons:
            texts = {c.get("context_index"): c.get("text", "") for c in data.get("contexts", []) if isinstance(c, dict)}
            cap = reason_cap(schema)
            for verdict in answer["verdicts"]:
                reason = f"{verdict['reason']} The context says: {texts.get(verdict['context_index'], '')}"
                verdict["reason"] = reason[:cap] if cap is not None else reason
        if fault == "wrong_shape":
            self._shape_turn += 1
            answer = {"verdicts": misshape(answer["verdicts"], self._shape_turn - 1)}
        elif fault == "one_based":
            answer = {"verdicts": [{**v, "context_index": v["context_index"] + 1} for v in answer["verdicts"]]}
        content = "Sure! Here are the verdicts: verdict=yes" if fault == "malformed" else json.dumps(answer)
        finish_reason = "stop"
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0 \
                and len(content) > 4 * max_tokens:
            content, finish_reason = content[:4 * max_tokens], "length"
            self.stats.cut += 1

        prompt_chars = sum(len(m.get("content") or "") for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str))
        prompt_tokens = _tokens(prompt_chars)
        completion_tokens = _tokens(len(content))
        self.stats.prompt_tokens += prompt_tokens
        self.stats.completion_tokens += completion_tokens
        model = body.get("model") if isinstance(body.get("model"), str) else settings.model
        return self._respond(
            200,
            {
                "id": f"chatcmpl-stub-{self.stats.requests}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )

    def _changed(self, verdicts: list[dict[str, Any]], data: dict[str, Any]) -> list[dict[str, Any]]:
        """The verdicts as a changed (flip_rate) or noisy (noise_rate) judge gives them."""
        settings = self.settings
        if not settings.flip_rate and not settings.noise_rate:
            return verdicts
        texts = {c.get("context_index"): c.get("text", "") for c in data.get("contexts", []) if isinstance(c, dict)}
        for verdict in verdicts:
            turn = flipped(texts.get(verdict["context_index"], ""), settings.flip_rate, settings.flip_salt)
            if settings.noise_rate and self._noise.random() < settings.noise_rate:
                turn = not turn
            if turn:
                verdict["verdict"] = "no" if verdict["verdict"] == "yes" else "yes"
                verdict["reason"] = "The judge answers this context differently now."
        return verdicts

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.settings.model, "object": "model", "owned_by": "ctxprec"}]}
        )

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats.to_dict())

    async def _control(self, request: web.Request) -> web.Response:
        try:
            changes = await request.json()
        except ValueError:
            return web.json_response({"error": "control body is not valid JSON"}, status=400)
        if not isinstance(changes, dict):
            return web.json_response({"error": "control body must be a JSON object"}, status=400)
        reset = bool(changes.pop("reset_stats", False))
        try:
            settings = self.configure(**changes)
        except (TypeError, ValueError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        if reset:
            self.reset_stats()
        public = asdict(settings)
        public["fault_kinds"] = list(settings.fault_kinds)
        public["reject_forms"] = list(settings.reject_forms)
        public["api_key"] = "set" if settings.api_key else None
        return web.json_response({"settings": public})


# --- command line -----------------------------------------------------------------------------

NON_NEGATIVE = flag_type(parse_non_negative)
RATE = flag_type(parse_rate)


def _fault_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in ALL_FAULTS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"unknown fault kind(s) {unknown or text!r}; choose from {','.join(ALL_FAULTS)}")
    return kinds


def _forms(text: str) -> tuple[str, ...]:
    forms = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in forms if f not in FORMS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown form(s) {unknown!r}; choose from {','.join(FORMS)}")
    return forms


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8099, help="port to bind; 0 picks a free one (default 8099)")
    parser.add_argument("--latency-ms", type=NON_NEGATIVE, default=0.0, help="added to every answer")
    parser.add_argument("--jitter-ms", type=NON_NEGATIVE, default=0.0, help="plus a uniform 0..jitter-ms")
    parser.add_argument("--error-rate", type=RATE, default=0.0, help="probability (0..1) that a request gets a fault")
    parser.add_argument(
        "--fault-kinds", type=_fault_kinds, default=FAULT_KINDS,
        help=f"comma list of {','.join(ALL_FAULTS)} (default {','.join(FAULT_KINDS)})"
    )
    parser.add_argument("--slots", type=flag_type(parse_count0), default=0,
                        help="requests judged at once, the rest queue as in a model server (default 0: no limit)")
    parser.add_argument("--reject-forms", type=_forms, default=(),
                        help=f"comma list of response_format forms ({','.join(FORMS)}) answered --reject-status")
    parser.add_argument("--reject-status", type=int, choices=(400, 422, 500), default=500,
                        help="status for a rejected form: 400, 422 or 500 (default 500, as llama-cpp-python answers json_schema)")
    parser.add_argument("--verbose-reasons", action="store_true",
                        help="copy each context into its reason, as small models do (cut at max_tokens)")
    parser.add_argument("--hang-s", type=NON_NEGATIVE, default=30.0, help="how long a 'timeout' fault holds a request")
    parser.add_argument("--huge-answer-mb", type=NON_NEGATIVE, default=0.0,
                        help="stream every answer as this many MB of a JSON document that never ends (default 0: off)")
    parser.add_argument("--flip-rate", type=RATE, default=0.0,
                        help="share of contexts (picked by a hash of their text) always judged the other way: a "
                             "changed judge (default 0)")
    parser.add_argument("--flip-salt", default="", help="which contexts --flip-rate picks (default: none given)")
    parser.add_argument("--noise-rate", type=RATE, default=0.0,
                        help="probability that any verdict is turned around on each answer: run-to-run variation "
                             "(default 0)")
    parser.add_argument("--retry-after-s", type=NON_NEGATIVE, default=1.0, help="Retry-After of a 'rate_limit' fault")
    parser.add_argument("--seed", type=int, default=None, help="seed of the fault/jitter RNG, for reproducible runs (default: a fresh seed each run)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model id listed by GET /v1/models")
    parser.add_argument("--api-key", default=None, help="if set, require this Bearer key, 401 otherwise (default: no key required)")


def settings_from_args(args: argparse.Namespace) -> StubSettings:
    return StubSettings(
        latency_ms=args.latency_ms,
        jitter_ms=args.jitter_ms,
        error_rate=args.error_rate,
        fault_kinds=tuple(args.fault_kinds),
        hang_s=args.hang_s,
        retry_after_s=args.retry_after_s,
        seed=args.seed,
        model=args.model,
        api_key=args.api_key,
        slots=args.slots,
        reject_forms=tuple(args.reject_forms),
        reject_status=args.reject_status,
        verbose_reasons=args.verbose_reasons,
        huge_answer_mb=args.huge_answer_mb,
        flip_rate=args.flip_rate,
        flip_salt=args.flip_salt,
        noise_rate=args.noise_rate,
    )


async def _serve(args: argparse.Namespace) -> None:
    stub = StubJudge(settings_from_args(args))
    await stub.start(args.host, args.port)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, done.set)
        except (NotImplementedError, RuntimeError):
            pass
    # One line on stdout so that a parent process (benchmarks) learns the port when --port 0.
    sys.stdout.write(f"stub judge listening on {stub.url}\n")
    sys.stdout.flush()
    try:
        await done.wait()
    finally:
        await stub.stop()


def run(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_serve(args))
    except OSError as exc:
        sys.stderr.write(f"stub-judge: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}\n")
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxprec stub-judge", description="OpenAI-compatible deterministic stub judge",
                                     allow_abbrev=False)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
