"""The answer a retrieval led to: the output of the LLM call that consumed it.

A production trace rarely has the shape a tutorial chain has: the LLM span may sit under another
chain than the retriever, under an HTTP server span, several levels down, or beside the retriever
under an app span. So the answer is found by the trace's structure and by what the spans say,
the clocks only breaking ties:

1. LLM spans (as the conventions table recognises them: OpenInference, GenAI, OpenLLMetry,
   Mastra, the Vercel AI SDK) that are neither the retrieval's ancestors nor inside it, and that
   start no earlier than `tolerance` before it (the LLM may run on a host whose clock is behind
   the retriever's: `assembly.clock_tolerance_s`), are the candidates;
2. they are looked at ring by ring, nearest first (trace_tree.py): the spans beside the
   retrieval under its parent (later siblings and their descendants), then those under its
   grandparent, and so on up to the other parts of the trace;
3. in the nearest ring where some do, those whose input holds text of the retrieved contexts
   consumed the retrieval, and the last of them in time gives the final answer (refine and
   tree-summarize modes make several calls);
4. if none in any ring holds context text, the first candidate of the nearest ring that gives an
   answer (those that start after the retrieval before those within the tolerance); a candidate
   with an empty output (an agent's turn that only called a tool) gives no answer;
5. only when no candidate gives one (there is none, or every one only called tools, as an agent
   that answers through a `final_answer` tool does), a chain's output: the outermost ancestor of
   the retrieval with an output that reads as an answer (the root span's when no ancestor has one).

Each span's kind, prompt and output are read once per trace (the tree's memo), and a ring is a
slice of the trace's depth-first order: a trace of 20,000 spans and 500 retrievals costs what
its retrievals' own neighbourhoods hold, not 500 scans of the trace.

Outputs are read as clean text (values.py) from the keys the table names, those of the convention
that recognised the LLM span first; `Answer.clean` is False when a value of an unknown shape had
to be used as it stood.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.assembly.table import AnswerSource, LlmRule, table
from ctxprec.collector.assembly.trace_tree import TraceTree
from ctxprec.collector.assembly.values import (
    Text,
    answer_text,
    loads,
    normalize,
    repr_message_text,
    strings_in,
)
from ctxprec.collector.loop_turns import CHUNK
from ctxprec.collector.model import RetrievedContext

LLM_SPAN = "llm_span"
CHAIN_OUTPUT = "chain_output"
NONE = "none"

_TABLE = table()
_LLM_RULES = _TABLE.llm_rules
_ANSWERS = _TABLE.answers
_ANSWER_PREFIXES = _TABLE.answer_prefixes
_CHAIN_OUTPUTS = _TABLE.chain_outputs
# Keys of the attributes that say a span is an LLM call (its kind), never part of its prompt.
_DECLARING_KEYS = frozenset(c.key for rule in _LLM_RULES for c in rule.declared)
_NEEDLE_CHARS = 120  # a context is found in a prompt by its first characters (whitespace folded)
_MIN_NEEDLE_CHARS = 12
_ASSISTANT_ROLES = ("assistant", "ai", "model")
_FRAMINGS = _TABLE.answer_framing
_PARSED_DEPTH = 3  # DSPy: LM span <- adapter span <- Predict span


@dataclass(frozen=True, slots=True)
class Answer:
    text: str | None
    source: str  # llm_span | chain_output | none
    clean: bool = True


NO_ANSWER = Answer(None, NONE)


def llm_rule(span: SpanRecord) -> LlmRule | None:
    """The convention that says `span` is an LLM call (table order), else None. A convention whose
    kind attribute is `exclusive` decides alone when the span carries that attribute."""
    attributes, name = span.attributes, span.name
    for rule in _LLM_RULES:
        if rule.exclusive and any(c.present_in(attributes) for c in rule.declared):
            return rule if any(c.holds(name, attributes) for c in rule.declared) else None
    for rule in _LLM_RULES:
        if any(c.holds(name, attributes) for c in rule.declared):
            return rule
        for spec in rule.present:
            if spec.pattern:
                prefix, suffix = spec.prefix or "", spec.suffix
                if any(k.startswith(prefix) and k.endswith(suffix) for k in attributes):
                    return rule
            elif spec.key in attributes:
                return rule
    return None


def is_llm_span(span: SpanRecord) -> bool:
    return llm_rule(span) is not None


def llm_output(span: SpanRecord, rule: LlmRule | None = None) -> Text | None:
    """The answer an LLM span produced, as clean text: where the convention that recognised the
    span puts it first, then any other known key. Empty outputs (a turn that only called a
    tool) are no answer."""
    attributes = span.attributes
    sources = (*rule.answers, *_ANSWERS) if rule is not None else _ANSWERS
    for source in sources:
        found = _read_answer(source, attributes)
        if found is not None and found.value.strip():
            return found
    return None


def _read_answer(source: AnswerSource, attributes: dict[str, Any]) -> Text | None:
    if source.messages is not None:
        text = _indexed_messages(attributes, source)
        return Text(text) if text else None
    assert source.value is not None
    value = source.value.resolve(attributes)
    if value is None:
        return None
    if source.as_written:  # a structured output: the object is the answer, as the model wrote it
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        return Text(text)
    found = answer_text(value)
    prefix = source.strip_prefix
    if found is not None and prefix and found.clean and found.value.startswith(prefix):
        # LlamaIndex's ChatResponse reads "assistant: <text>" when turned into a string.
        return Text(found.value[len(prefix):])
    return found


def span_output(span: SpanRecord) -> Text | None:
    """A chain span's output as an answer."""
    for key in _CHAIN_OUTPUTS:
        if key in span.attributes:
            found = answer_text(span.attributes[key])
            if found is not None:
                return found
    return None


def _indexed_messages(attributes: dict[str, Any], source: AnswerSource) -> str | None:
    """`prefix.{i}.content` style output messages, in index order, assistant turns only when
    roles are given."""
    pattern = source.messages
    assert pattern is not None
    # message index -> (the rank of its content field among the alternatives, part, text)
    contents: dict[int, list[tuple[int, int, str]]] = {}
    roles: dict[int, str] = {}
    fields = source.content_fields
    for key, value in attributes.items():
        match = pattern.match(key)
        if match is None:
            continue
        index = int(match.group(1))
        field = match.group(2)
        if field == source.role:
            if isinstance(value, str):
                roles[index] = value.lower()
        elif isinstance(value, str):
            part = next((g for g in match.groups()[2:] if g is not None), None)
            rank = next((n for n, f in enumerate(fields) if f.fullmatch(field)), 0)
            contents.setdefault(index, []).append((rank, int(part) if part is not None else -1, value))
    if not contents:
        return None
    indices = sorted(contents)
    if any(roles.get(i) in _ASSISTANT_ROLES for i in indices):
        indices = [i for i in indices if roles.get(i, "assistant") in _ASSISTANT_ROLES]
    texts = []
    for i in indices:
        first = min(rank for rank, _, _ in contents[i])  # the first alternative this message has
        texts.append("".join(text for _, _, text in sorted(p for p in contents[i] if p[0] == first)))
    joined = "\n".join(t for t in texts if t)
    return joined or None


def llm_input_text(span: SpanRecord, rule: LlmRule | None = None) -> str:
    """Everything the span says went into the model, JSON opened and whitespace folded: the
    prompt attributes its convention names, else every attribute that is not an answer
    (prompts, input messages, system instructions, template variables)."""
    attributes = span.attributes
    if rule is not None and rule.prompt:
        values = [attributes[key] for key in rule.prompt if key in attributes]
    else:
        values = [value for key, value in attributes.items()
                  if not key.startswith(_ANSWER_PREFIXES) and key not in _DECLARING_KEYS]
    pieces: list[str] = []
    for value in values:
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


DEFAULT_TOLERANCE_NS = 1_000_000_000
_LLM_INDEX = "answers.llm_spans"
_PROMPT = "answers.prompt"
_OUTPUT = "answers.output"
_MISSING = object()


def _llm_spans(tree: TraceTree) -> tuple[list[int], list[tuple[SpanRecord, LlmRule]]]:
    """The trace's LLM spans with their rule, as positions in the tree's depth-first order."""
    for _ in index_steps(tree):
        pass
    return tree.memo[_LLM_INDEX]


def index_steps(tree: TraceTree, every: int = CHUNK) -> Iterator[None]:
    """Reads which spans of the trace are LLM calls, yielding every `every` spans (a caller that
    shares the event loop turns between them); nothing to do once read."""
    if _LLM_INDEX in tree.memo:
        return
    yield from tree.index_steps(every)
    positions: list[int] = []
    entries: list[tuple[SpanRecord, LlmRule]] = []
    for position, span in enumerate(tree.order()):
        rule = llm_rule(span)
        if rule is not None:
            positions.append(position)
            entries.append((span, rule))
        if position % every == every - 1:
            yield
    tree.memo[_LLM_INDEX] = (positions, entries)


def _prompt(tree: TraceTree, span: SpanRecord, rule: LlmRule) -> str:
    key = (_PROMPT, id(span))
    found = tree.memo.get(key)
    if found is None:
        found = tree.memo[key] = llm_input_text(span, rule)
    return found


def _output(tree: TraceTree, span: SpanRecord, rule: LlmRule) -> Text | None:
    key = (_OUTPUT, id(span))
    found = tree.memo.get(key, _MISSING)
    if found is _MISSING:
        found = tree.memo[key] = llm_output(span, rule)
    return found  # type: ignore[return-value]


def _time(entry: tuple[SpanRecord, LlmRule]) -> tuple[int, int]:
    return entry[0].start_time_unix_nano, entry[0].end_time_unix_nano


def find_answer(retrieval: SpanRecord, contexts: Sequence[RetrievedContext], tree: TraceTree,
                tolerance_ns: int = DEFAULT_TOLERANCE_NS) -> Answer:
    positions, entries = _llm_spans(tree)
    start = retrieval.start_time_unix_nano
    earliest = start - tolerance_ns
    needles = context_needles(contexts)
    first: tuple[Text, SpanRecord] | None = None  # the nearest ring's first candidate with an answer
    for ring in tree.rings(retrieval):
        candidates = [entries[i] for i in tree.in_ranges(positions, ring)
                      if entries[i][0].start_time_unix_nano >= earliest]
        if not candidates:
            continue
        candidates.sort(key=_time)
        if needles:
            # An SDK's outer call and its inner model call (ai.generateText around doGenerate)
            # both hold the prompt and the answer: either gives the same one answer.
            for span, rule in reversed(candidates):
                if consumed(_prompt(tree, span, rule), needles):
                    found = _output(tree, span, rule)
                    if found is not None:
                        return _llm_answer(found, span, tree)
        if first is None:
            # Within the tolerance before the retrieval only when none starts after it.
            for span, rule in sorted(candidates, key=lambda c: c[0].start_time_unix_nano < start):
                found = _output(tree, span, rule)
                if found is not None:
                    first = found, span
                    break
    if first is not None:
        return _llm_answer(*first, tree)
    # No LLM span, or only turns that called tools (an agent whose last turn calls a
    # `final_answer` tool): the agent's output.
    return _chain_answer(retrieval, contexts, tree)


def _llm_answer(found: Text, span: SpanRecord, tree: TraceTree) -> Answer:
    text = found.value
    if found.clean:
        text = unframed(text, lambda: _parsed_outputs(span, tree)) or text
    return Answer(text, LLM_SPAN, found.clean)


def unframed(text: str, parsed: Callable[[], list[dict[str, Any]]] = list) -> str | None:
    """An answer without the field markers a framework wrote around it (the table's
    `answer_framing`: DSPy's `[[ ## answer ## ]]`): the output fields' texts, a chain of
    thought's reasoning left out, each field's parsed value preferred where a span holds it
    (`parsed()`: objects with the fields, nearest first). None when `text` carries no markers."""
    for framing in _FRAMINGS:
        marks = list(framing.marker.finditer(text))
        if not marks:
            continue
        fields: dict[str, str] = {}
        for n, mark in enumerate(marks):
            name = mark.group(1)
            if name in framing.end_fields:
                break
            end = marks[n + 1].start() if n + 1 < len(marks) else len(text)
            fields[name] = text[mark.end():end].strip()
        chosen = [f for f in fields if f not in framing.skip_fields] or list(fields)
        if not chosen:
            return None
        holder = next((p for p in parsed() if all(f in p for f in chosen)), {})
        values = [_field_text(holder[f]) if f in holder else fields[f] for f in chosen]
        return "\n".join(v for v in values if v) or None
    return None


def _field_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _parsed_outputs(span: SpanRecord, tree: TraceTree) -> list[dict[str, Any]]:
    """The outputs of an LLM span's nearest ancestors read as objects (DSPy's adapter span
    writes the parsed fields: `[{"answer": ...}]`)."""
    out: list[dict[str, Any]] = []
    for depth, ancestor in enumerate(tree.ancestors(span)):
        if depth == _PARSED_DEPTH:
            break
        for key in _CHAIN_OUTPUTS:
            value = loads(ancestor.attributes.get(key))
            if isinstance(value, list) and len(value) == 1:
                value = loads(value[0])
            if isinstance(value, dict):
                out.append(value)
    return out


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
