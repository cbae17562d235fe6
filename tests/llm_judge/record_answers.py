"""Records what SmolLM2-135M-Instruct answers to the judge's verdict request for each committed
sample (tests/llm_judge/samples.jsonl), without a schema (`json_object`) and with one
(`json_object_schema`, as llama-cpp-python takes it), into tests/scorer/fixtures/smollm2_answers.jsonl,
the fixture of tests/scorer/test_recorded_answers.py.

    make llama-server
    .venv/bin/python -m tests.llm_judge.record_answers      # starts and stops the server itself

Each line: the sample's line number, the form, the context indices asked for, the max_tokens
sent, and the answer as the server returned it (content, finish_reason, completion tokens)."""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from ctxprec.scorer.judge.prompt import verdict_messages
from ctxprec.scorer.judge.structured import REASON_MAX_CHARS, response_format, verdict_schema

from tests.llm_judge.server import MODEL_ALIAS, LlamaServer

HERE = Path(__file__).parent
OUT = HERE.parents[0] / "scorer" / "fixtures" / "smollm2_answers.jsonl"
FORMS = ("json_object", "json_object_schema")


def record(url: str) -> list[dict]:
    lines = []
    for number, line in enumerate((HERE / "samples.jsonl").read_text(encoding="utf-8").splitlines(), 1):
        event = json.loads(line)
        items = list(enumerate(event["contexts"]))
        indices = [i for i, _ in items]
        messages = verdict_messages(query=event["query"], reference_kind="output", reference=event["output"],
                                    items=items, reason_chars=REASON_MAX_CHARS)
        max_tokens = 64 + 96 * len(items)  # the judge's first ask (scorer/judge/llm.py)
        for form in FORMS:
            body = {"model": MODEL_ALIAS, "messages": [{"role": m.role, "content": m.content} for m in messages],
                    "temperature": 0.0, "max_tokens": max_tokens,
                    "response_format": response_format(form, verdict_schema(indices))}
            request = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=300) as response:
                answer = json.load(response)
            choice = answer["choices"][0]
            lines.append({"sample": number, "form": form, "indices": indices, "max_tokens": max_tokens,
                          "content": choice["message"]["content"], "finish_reason": choice["finish_reason"],
                          "completion_tokens": answer["usage"]["completion_tokens"]})
    return lines


def main() -> None:
    server = LlamaServer().start()
    try:
        lines = record(server.url)
    finally:
        server.stop()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    print(f"wrote {len(lines)} answers to {OUT}")


if __name__ == "__main__":
    main()
