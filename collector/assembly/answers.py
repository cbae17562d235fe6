"""The answer a retrieval led to: the output of the LLM call that consumed it.

A production trace rarely has the shape a tutorial chain has: the LLM span may sit under another
chain than the retriever, under an HTTP server span, several levels down, or beside the retriever
under an app span. So the answer is found by what the spans say, not by where they sit:

1. LLM spans (any convention) that start after the retrieval started and are not inside it are
   the candidates;
2. those whose input holds text of the retrieved contexts consumed the retrieval, and the last of
   them in time gives the final answer (refine and tree-summarize modes make several calls);
3. if none holds context text, the first candidate;
4. only when there is no candidate, a chain's output: the outermost ancestor of the retrieval
   with an output that reads as an answer (the root span's when no ancestor has one).

Outputs are read as clean text (values.py); `Answer.clean` is False when a value of an unknown
shape had to be used as it stood.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ctxprec.collector.assembly.documents import (
    GENAI_OPERATION,
    OI_KIND,
    TRACELOOP_OUTPUT,
)
from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.assembly.trace_tree import TraceTree
from ctxprec.collector.assembly.values import (
    Text,
    answer_text,
    normalize,
    repr_message_text,
    strings_in,
)
from ctxprec.collector.model import RetrievedContext

LLM_SPAN = "llm_span"
CHAIN_OUTPUT = "chain_output"
NONE = "none"

LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion", "llm_request"})
_OUTPUT_PREFIXES = ("llm.output_messages.", "output.", "gen_ai.output.", "gen_ai.completion.", TRACELOOP_OUTPUT,
                    "gen_ai.task.output")
_OI_OUTPUT_MESSAGE = re.compile(r"^llm\.output_messages\.(\d{1,6})\.message\.(role|content|contents\.(\d{1,6})\.message_content\.text)$")
_GENAI_COMPLETION = re.compile(r"^gen_ai\.completion\.(\d{1,6})\.(role|content)$")
_NEEDLE_CHARS = 120  # a context is found in a prompt by its first characters (whitespace folded)
_MIN_NEEDLE_CHARS = 12


@dataclass(frozen=True, slots=True)
class Answer:
    text: str | None
    source: str  # llm_span | chain_output | none
    clean: bool = True


NO_ANSWER = Answer(None, NONE)


def is_llm_span(span: SpanRecord) -> bool:
    attributes = span.attributes
    kind = attributes.get(OI_KIND)
    if isinstance(kind, str):
        return kind.upper() == "LLM"
    if str(attributes.get(GENAI_OPERATION)) in LLM_OPERATIONS:
        return True
    if attributes.get("llm.request.type") in ("chat", "completion"):
        return True
    return "gen_ai.output.messages" in attributes or any(key.startswith("gen_ai.completion.") for key in attributes)


def llm_output(span: SpanRecord) -> Text | None:
    """The answer an LLM span produced, as clean text when any known key holds it."""
    attributes = span.attributes
    text = _indexed_messages(attributes, _OI_OUTPUT_MESSAGE)
    if text:
        return Text(text)
    for key in ("gen_ai.output.messages",):
        if key in attributes:
            found = answer_text(attributes[key])
            if found is not None:
                return found
    text = _indexed_messages(attributes, _GENAI_COMPLETION)
    if text:
        return Text(text)
    for key in ("output.value", TRACELOOP_OUTPUT):
        if key in attributes:
            found = answer_text(attributes[key])
            if found is not None:
                # LlamaIndex's ChatResponse reads "assistant: <text>" when turned into a string.
                if found.clean and found.value.startswith("assistant: "):
                    return Text(found.value[len("assistant: "):])
                return found
    return None


def span_output(span: SpanRecord) -> Text | None:
    """A chain span's output as an answer."""
    for key in ("output.value", TRACELOOP_OUTPUT, "gen_ai.task.output"):
        if key in span.attributes:
            found = answer_text(span.attributes[key])
            if found is not None:
                return found
    return None


def _indexed_messages(attributes: dict[str, Any], pattern: re.Pattern[str]) -> str | None:
    """`prefix.{i}.content` style output messages, in index order, assistant turns only when
    roles are given."""
    contents: dict[int, list[tuple[int, str]]] = {}
    roles: dict[int, str] = {}
    for key, value in attributes.items():
        match = pattern.match(key)
        if match is None:
            continue
        index = int(match.group(1))
        if match.group(2) == "role":
            if isinstance(value, str):
                roles[index] = value.lower()
        elif isinstance(value, str):
            part = match.group(3) if match.lastindex and match.lastindex >= 3 else None
            contents.setdefault(index, []).append((int(part) if part is not None else -1, value))
    if not contents:
        return None
    indices = sorted(contents)
    if any(roles.get(i) in ("assistant", "ai", "model") for i in indices):
        indices = [i for i in indices if roles.get(i, "assistant") in ("assistant", "ai", "model")]
    texts = ["".join(text for _, text in sorted(contents[i])) for i in indices]
    joined = "\n".join(t for t in texts if t)
    return joined or None


def llm_input_text(span: SpanRecord) -> str:
    """Everything the span says went into the model, JSON opened and whitespace folded: prompts,
    input messages, system instructions, template variables."""
    pieces: list[str] = []
    for key, value in span.attributes.items():
        if key.startswith(_OUTPUT_PREFIXES) or key == OI_KIND:
            continue
        for text in strings_in(value):
            pieces.append(text)
            unwrapped = repr_message_text(text)
            if unwrapped is not None:
                pieces.append(unwrapped)
    return normalize("\n".join(pieces))


def context_needles(contexts: Sequence[RetrievedContext]) -> list[str]:
    needles: list[str] = []
    for context in contexts:
        needle = normalize(context.content)[:_NEEDLE_CHARS]
        if len(needle) >= _MIN_NEEDLE_CHARS or (needle and needle == normalize(context.content)):
            needles.append(needle)
    return needles


def consumed(haystack: str, needles: Iterable[str]) -> bool:
    return any(needle in haystack for needle in needles)


def find_answer(retrieval: SpanRecord, contexts: Sequence[RetrievedContext], tree: TraceTree) -> Answer:
    candidates = sorted(
        (s for s in tree.spans
         if s.span_id != retrieval.span_id and s.start_time_unix_nano >= retrieval.start_time_unix_nano
         and is_llm_span(s) and not tree.is_ancestor(retrieval, of=s)),
        key=lambda s: (s.start_time_unix_nano, s.end_time_unix_nano))
    if candidates:
        needles = context_needles(contexts)
        consumers = [s for s in candidates if needles and consumed(llm_input_text(s), needles)]
        for span in reversed(consumers):
            found = llm_output(span)
            if found is not None:
                return Answer(found.value, LLM_SPAN, found.clean)
        for span in candidates:
            found = llm_output(span)
            if found is not None:
                return Answer(found.value, LLM_SPAN, found.clean)
        return NO_ANSWER
    return _chain_answer(retrieval, contexts, tree)


def _chain_answer(retrieval: SpanRecord, contexts: Sequence[RetrievedContext], tree: TraceTree) -> Answer:
    needles = context_needles(contexts)
    chosen: Text | None = None
    for ancestor in tree.ancestors(retrieval):  # nearest first: the last usable one is the outermost
        found = span_output(ancestor)
        if found is not None and _reads_as_answer(found.value, needles):
            chosen = found
    if chosen is None:
        for root in tree.roots():
            found = span_output(root)
            if found is not None and _reads_as_answer(found.value, needles):
                chosen = found
                break
    if chosen is None:
        return NO_ANSWER
    return Answer(chosen.value, CHAIN_OUTPUT, chosen.clean)


def _reads_as_answer(text: str, needles: Sequence[str]) -> bool:
    """Not the retrieved documents passed on (a formatting step's output holds most of them)."""
    if not needles:
        return True
    folded = normalize(text)
    held = sum(1 for needle in needles if needle in folded)
    return held * 2 <= len(needles) if len(needles) > 1 else held == 0
