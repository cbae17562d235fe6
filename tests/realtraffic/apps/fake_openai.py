"""A canned OpenAI chat-completions endpoint served through httpx.MockTransport.

Lets the frameworks' real OpenAI client classes run (and be traced as such) with no network.
"""

from __future__ import annotations

import json

import httpx

from .corpus import canned_answer_for

FAKE_MODEL = "gpt-4o-mini"
# A host that cannot resolve, in case the mock transport were ever bypassed.
FAKE_BASE_URL = "http://openai.invalid/v1"
FAKE_API_KEY = "sk-test-offline"


def _message_text(content: object) -> str:
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _chat_completion(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    prompt = "\n".join(_message_text(m.get("content")) for m in body.get("messages", []))
    answer = canned_answer_for(prompt)
    prompt_tokens, completion_tokens = len(prompt.split()), len(answer.split())
    completion = {
        "id": "chatcmpl-canned",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": body.get("model", FAKE_MODEL),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return httpx.Response(200, json=completion)


def mock_transport() -> httpx.MockTransport:
    return httpx.MockTransport(_chat_completion)
