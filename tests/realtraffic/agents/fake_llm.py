"""An OpenAI-compatible model server on 127.0.0.1, in the app's own process: chat completions and the
Responses API, each answering like a tool-calling model.

The agents' real clients (the OpenAI SDK, litellm, google-genai through litellm, smolagents) talk to
it over real HTTP, so nothing is mocked below the client. Its behaviour is fixed by the request:

- tools offered and no tool result in the conversation yet: call the first tool (other than
  `final_answer`) with the question as its query argument, or a city for a weather tool;
- a tool result already in the conversation: answer, with the corpus's canned answer for the
  question (or the weather report), through `final_answer` when that tool is offered (smolagents);
- a DSPy prompt (its `[[ ## field ## ]]` framing): the answer framed as DSPy's ChatAdapter asks.
"""
from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.realtraffic.apps.corpus import DOCS, QUESTIONS, canned_answer_for

FAKE_MODEL = "gpt-4o-mini"
FAKE_API_KEY = "sk-test-offline"
WEATHER_CITY = "Utrecht"
WEATHER_REPORT = "18 °C and cloudy"
WEATHER_ANSWER = f"It is {WEATHER_REPORT} in {WEATHER_CITY} today."
QUERY_ARGUMENTS = ("query", "q", "question", "search", "text")
_DSPY_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]")
_ids = itertools.count(1)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part.get("text") or part.get("content") or part.get("output") or "")
                         if isinstance(part, dict) else str(part) for part in content)
    if isinstance(content, dict):
        return _text(content.get("text") or content.get("content") or "")
    return "" if content is None else str(content)


def _question(texts: list[str]) -> str:
    """The corpus question the conversation is about (the last one named), else the last user text."""
    for text in reversed(texts):
        for question in QUESTIONS:
            if question.text in text:
                return question.text
    return texts[-1] if texts else ""


def _tool_result_seen(texts: list[str], had_tool_message: bool) -> bool:
    if had_tool_message:
        return True
    joined = "\n".join(texts)
    return WEATHER_REPORT in joined or any(doc.text in joined for doc in DOCS)


def _arguments(parameters: dict[str, Any], question: str) -> dict[str, Any]:
    properties = parameters.get("properties") or {}
    if "city" in properties:
        return {"city": WEATHER_CITY}
    for name in QUERY_ARGUMENTS:
        if name in properties:
            return {name: question}
    strings = [name for name, schema in properties.items() if schema.get("type") == "string"]
    return {strings[0] if strings else "query": question}


def _answer(question: str, system: str) -> str:
    if "weather" in system.lower() or "weather" in question.lower():
        return WEATHER_ANSWER
    return canned_answer_for(question)


def _dspy_reply(system: str, answer: str) -> str | None:
    """DSPy's ChatAdapter asks for each output field between `[[ ## name ## ]]` markers."""
    fields = [f for f in _DSPY_FIELD.findall(system) if f != "completed"]
    if not fields:
        return None
    outputs = fields[fields.index("answer"):] if "answer" in fields else fields[-1:]
    return "".join(f"[[ ## {name} ## ]]\n{answer}\n\n" for name in outputs) + "[[ ## completed ## ]]"


class Turn:
    """What the model does next for one request: call a tool, or answer."""

    def __init__(self, texts: list[str], system: str, tools: list[tuple[str, dict[str, Any]]],
                 had_tool_message: bool) -> None:
        self.question = _question(texts)
        answer = _answer(self.question, system)
        self.tool: tuple[str, dict[str, Any]] | None = None
        self.text: str | None = None
        callable_tools = [(name, params) for name, params in tools if name != "final_answer"]
        if callable_tools and not _tool_result_seen(texts, had_tool_message):
            name, params = callable_tools[0]
            self.tool = (name, _arguments(params, self.question))
        elif any(name == "final_answer" for name, _ in tools):
            self.tool = ("final_answer", {"answer": answer})
        else:
            self.text = _dspy_reply(system, answer) or answer


def _chat_turn(body: dict[str, Any]) -> Turn:
    messages = body.get("messages") or []
    system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    texts = [_text(m.get("content")) for m in messages if m.get("role") not in ("system", "developer")]
    texts += [_text(call.get("function", {}).get("arguments")) for m in messages for call in m.get("tool_calls") or []]
    tools = [(t["function"]["name"], t["function"].get("parameters") or {}) for t in body.get("tools") or []
             if t.get("type") == "function"]
    return Turn(texts, system, tools, any(m.get("role") == "tool" for m in messages))


def _usage(turn: Turn) -> tuple[int, int]:
    return len(turn.question.split()) + 20, len((turn.text or json.dumps(turn.tool)).split())


def chat_completion(body: dict[str, Any]) -> dict[str, Any]:
    turn = _chat_turn(body)
    n = next(_ids)
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    finish = "stop"
    if turn.tool:
        name, arguments = turn.tool
        message["tool_calls"] = [{"id": f"call_{n}", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(arguments)}}]
        finish = "tool_calls"
    prompt_tokens, completion_tokens = _usage(turn)
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1_700_000_000,
            "model": body.get("model", FAKE_MODEL), "system_fingerprint": "fp_offline",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def _responses_turn(body: dict[str, Any]) -> Turn:
    items = body.get("input")
    items = [{"type": "message", "role": "user", "content": items}] if isinstance(items, str) else items or []
    system = _text(body.get("instructions"))
    texts, had_tool = [], False
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") in ("system", "developer"):
            system += "\n" + _text(item.get("content"))
        elif kind == "message":
            texts.append(_text(item.get("content")))
        elif kind == "function_call_output":
            had_tool = True
            texts.append(_text(item.get("output")))
        elif kind == "function_call":
            texts.append(_text(item.get("arguments")))
    tools = [(t["name"], t.get("parameters") or {}) for t in body.get("tools") or [] if t.get("type") == "function"]
    return Turn(texts, system, tools, had_tool)


def response(body: dict[str, Any]) -> dict[str, Any]:
    turn = _responses_turn(body)
    n = next(_ids)
    if turn.tool:
        name, arguments = turn.tool
        output: list[dict[str, Any]] = [{"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                                         "name": name, "arguments": json.dumps(arguments), "status": "completed"}]
    else:
        output = [{"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}]
    prompt_tokens, completion_tokens = _usage(turn)
    return {"id": f"resp_{n}", "object": "response", "created_at": 1_700_000_000, "status": "completed",
            "model": body.get("model", FAKE_MODEL), "output": output, "parallel_tool_calls": False,
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "temperature": 1.0, "top_p": 1.0, "error": None, "incomplete_details": None,
            "instructions": body.get("instructions"), "metadata": {}, "text": {"format": {"type": "text"}},
            "truncation": "disabled", "store": False,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


class _Handler(BaseHTTPRequestHandler):
    server_version = "fake-llm/1"

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/chat/completions"):
            reply = chat_completion(body)
        elif path.endswith("/responses"):
            reply = response(body)
        else:
            self.send_error(404, f"no fake for {path}")
            return
        if body.get("stream"):
            self.send_error(400, "the fake model does not stream")
            return
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        pass


@contextmanager
def fake_llm_server() -> Iterator[str]:
    """Serves the fake model on a free port; yields its OpenAI base URL (`http://127.0.0.1:N/v1`)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, name="fake-llm", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
