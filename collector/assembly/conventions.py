"""Finding the retrievals of an assembled trace, with their query, contexts and answer.

The rules come from the conventions table (table.py) and from the user's mappings
(`conventions.mapping`, `conventions.mappings`), tried in `conventions.order`. A span is taken as
a retrieval when a rule's declared attribute says so (`openinference.span.kind = RETRIEVER`,
`gen_ai.operation.name = retrieval`), when a mapping's `when` matches it, or when it carries
documents under an enabled rule; never by its name alone, and never when it builds an index
(a text splitter, an embedding call) unless a mapping names it.

One retrieval is never counted twice. Findings on one span are one retrieval, read by the first
rule in `order` that finds documents. Retrieval spans nested in one another (one an ancestor of
the other) are one retrieval too, as frameworks wrap their retrievers (LlamaIndex's `retrieve`
around `_retrieve`, a Mastra tool span around its vector query): it is read from the spans of the
nest with documents under the earliest rule in `order`, declared ones first, the outermost of
them; when no span of the nest has documents it is one retrieval without contexts (decided
`no_contexts`, or `no_content` when its documents carry no text or no span of it recorded a
query or documents). A re-ranker later in the nest's parent gives the list the model saw
(reranking.py). The answer comes from answers.py.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Generator, Sequence

from ctxprec.collector.assembly.answers import (
    CHAIN_OUTPUT,
    DEFAULT_TOLERANCE_NS,
    NO_ANSWER,
    Answer,
    find_answer,
)
from ctxprec.collector.assembly.answers import (
    index_steps as answer_index_steps,
)
from ctxprec.collector.assembly.documents import Found, read_documents
from ctxprec.collector.assembly.reranking import seen_by_model
from ctxprec.collector.assembly.silence import TraceSeen, why_not_taken
from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.assembly.specs import conditions, parse_spec, parse_specs
from ctxprec.collector.assembly.table import RetrievalRule, Source, ToolMatch, table
from ctxprec.collector.assembly.trace_tree import TraceTree
from ctxprec.collector.config_types import Count, OptionalText, setting
from ctxprec.collector.loop_turns import CHUNK, LoopTurns
from ctxprec.collector.model import Retrieval
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

OPENINFERENCE = "openinference"
GENAI = "genai"
OPENLLMETRY = "openllmetry"
MASTRA = "mastra"
TOOL = "tool"
MAPPING = "mapping"  # the single `conventions.mapping`
MAPPINGS = "mappings"  # in `order`: every entry of `conventions.mappings` not named there itself
BUILT_IN = table().retrieval_names
ALL_CONVENTIONS = (*BUILT_IN, MAPPING)
DEFAULT_ORDER = (MAPPINGS, *BUILT_IN, MAPPING)
TRACELOOP_NAME = "traceloop.entity.name"

_MAX_RULE_ATTRIBUTES = 64
_MAX_RULE_VALUE_CHARS = 256

__all__ = ["ALL_CONVENTIONS", "AttributeMapping", "ConventionConfig", "Conventions", "CountedNests", "Extracted",
           "GENAI", "MAPPING", "MAPPINGS", "MASTRA", "MappingEntry", "OPENINFERENCE", "OPENLLMETRY", "TOOL", "ToolsConfig",
           "rule_attributes"]


def _check_spec(value: str | None) -> str | None:
    if value is not None:
        parse_spec(value)  # ValueError names what is wrong
    return value


class AttributeMapping(BaseModel):
    """The single user mapping (`conventions.mapping`). Each field is an attribute key, optionally
    followed by a JSON path into that attribute's (JSON) value: `"app.request$.question"`,
    `"app.docs$[*].text"`. `contexts` and `ids` may instead be a per-item pattern with `{i}`:
    `"app.docs.{i}.text"`. Read on every span that has the `query` attribute."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: str = Field(description="attribute key (or key$json.path) of the query", min_length=1)
    contexts: str = Field(description="attribute key (or key$json.path, or a key pattern with {i}) of the "
                                      "contexts", min_length=1)
    ids: str | None = Field(None, description="attribute key (or key$json.path, or a key pattern with {i}) of the "
                                              "documents' ids, in the contexts' order")
    output: str | None = Field(None, description="attribute key (or key$json.path) of the answer")

    @field_validator("query", "contexts", "ids", "output")
    @classmethod
    def _spec(cls, value: str | None) -> str | None:
        return _check_spec(value)

    def query_key(self) -> str:
        return self.query.split("$", 1)[0]

    def rule(self, name: str = MAPPING) -> RetrievalRule:
        """The mapping as a rule: it reads the spans that carry its query attribute and its
        contexts (a JSON path must reach a list: a later step whose input repeats the query
        but whose output holds no documents is no second retrieval)."""
        return RetrievalRule(name=name, when=conditions({self.query_key(): "*"}), sources=self._sources(),
                             query=parse_specs(self.query), output=parse_spec(self.output) if self.output else None)

    def _sources(self) -> tuple[Source, ...]:
        """Where the documents are: the contexts (with their ids), the ids alone (documents whose
        text a resolver looks up), or nowhere (an entry that only gives the query)."""
        contexts = parse_spec(self.contexts) if self.contexts else None
        ids = parse_spec(self.ids) if self.ids else None
        listed = contexts or ids
        if listed is None:
            return ()
        return (Source(contexts=contexts, ids=ids, require="list" if listed.has_path else "key"),)


class MappingEntry(AttributeMapping):
    """One entry of `conventions.mappings`: a mapping that reads only the spans matching `when`.
    Its `contexts` may be left out: with `ids` its documents are known by id only (a resolver
    looks their text up), without them it gives the query of the retrieval nested in its spans
    (content capture off, the app records the question on a span of its own)."""

    contexts: str | None = Field(None, description="attribute key (or key$json.path, or a key pattern with {i}) of "
                                                   "the contexts")  # type: ignore[assignment]
    name: str = Field(description="how `conventions.order` names it", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    when: dict[str, str | int | float | bool | list[str | int | float | bool]] = Field(
        description="span attribute (or span.name) -> value, or list of values; all must match", min_length=1)

    def rule(self, name: str | None = None) -> RetrievalRule:
        """A span that matches `when` is a retrieval under this entry, with or without documents;
        being an index-building span does not keep it out (the entry names it)."""
        return RetrievalRule(name=self.name, when=conditions(self.when), sources=self._sources(),
                             query=parse_specs(self.query), output=parse_spec(self.output) if self.output else None,
                             built_in=False, when_declares=True)


class ToolsConfig(BaseModel):
    """Which agent tool calls are read as retrievals (YAML `conventions.tools`)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    mode: str = setting("auto", "tool-call spans (GenAI execute_tool, OpenInference TOOL) whose result is a list "
                                "of documents are retrievals: auto; off: no tool span is", choices=("auto", "off"))
    include: tuple[str, ...] = setting((), "tool names (globs) always taken as retrievals, whatever their result's "
                                           "shape (YAML only)")
    exclude: tuple[str, ...] = setting((), "tool names (globs) never taken as retrievals (YAML only)")

    @field_validator("include", "exclude", mode="before")
    @classmethod
    def _names(cls, raw: Any) -> Any:
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, (list, tuple)) or not all(isinstance(n, str) and n.strip() for n in raw):
            raise ValueError("must be a list of tool names or globs such as search_*")
        return tuple(n.strip() for n in raw)

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, raw: Any) -> Any:
        value = str(raw).strip().lower() if isinstance(raw, (str, bool)) else raw
        if value is False or value == "false":
            value = "off"
        if value not in ("auto", "off"):
            raise ValueError(f"must be auto or off, got {raw!r}")
        return value


class ConventionConfig(BaseModel):
    """How retrievals are read from spans (YAML section `conventions`)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    order: tuple[str, ...] = setting(DEFAULT_ORDER, "conventions tried per span and per nest of spans, the first "
                                                    "that finds documents wins; names: the built-in conventions, "
                                                    "mapping, each mappings entry's name, mappings for the entries "
                                                    "not named (YAML only)")
    mapping: AttributeMapping | None = setting(None, "your own attribute keys or JSON paths: {query, contexts, "
                                                     "ids, output}, read on every span with the query attribute "
                                                     "(YAML only)")
    mappings: tuple[MappingEntry, ...] = setting((), "your own attribute keys or JSON paths for the spans that match "
                                                     "`when`: a list of {name, when, query, contexts, ids, output} "
                                                     "(YAML only)")
    retriever_attribute: OptionalText = setting(None, "span attribute naming the retriever (metrics label); "
                                                      "default: traceloop.entity.name, else the span name")
    expected_output_attribute: OptionalText = setting(None, "span attribute holding a reference answer",
                                                      flag="--expected-output-attribute")
    max_contexts: Count = setting(100, "contexts scored per retrieval at most; the rest are counted, not scored")
    max_attribute_chars: Count = setting(20_000, "characters kept of each span attribute value of sampled traces")
    tools: ToolsConfig = Field(default_factory=ToolsConfig, description="agent tool calls read as retrievals")

    @field_validator("order", mode="before")
    @classmethod
    def _a_list(cls, raw: Any) -> Any:
        if isinstance(raw, str) or not isinstance(raw, (list, tuple)):
            raise ValueError(f"must be a list of {', '.join((*ALL_CONVENTIONS, MAPPINGS))} or mappings entry names")
        return tuple(raw)

    @model_validator(mode="after")
    def _known(self) -> "ConventionConfig":
        names = [entry.name for entry in self.mappings]
        clash = sorted({n for n in names if names.count(n) > 1 or n in (*ALL_CONVENTIONS, MAPPINGS)})
        if clash:
            raise ValueError(f"[mappings] entry name {clash[0]!r} is used twice or is a built-in convention's name")
        known = (*ALL_CONVENTIONS, MAPPINGS, *names)
        unknown = [name for name in self.order if name not in known]
        if unknown:
            raise ValueError(f"[order] unknown convention {unknown[0]!r}; known: {', '.join(known)}")
        repeated = sorted({n for n in self.order if self.order.count(n) > 1})
        if repeated:
            raise ValueError(f"[order] {repeated[0]!r} is listed twice")
        left_out = [n for n in names if n not in self.order] if MAPPINGS not in self.order else []
        if left_out:
            raise ValueError(f"[order] mappings entry {left_out[0]!r} is not in conventions.order "
                             f"(name it, or add {MAPPINGS!r})")
        return self

    def tool_match(self) -> ToolMatch | None:
        """Tool spans and the tools taken or left (`tools`), whether or not the convention is on."""
        rule = table().tool_rule
        if rule is None or rule.tool is None:
            return None
        return replace(rule.tool, include=self.tools.include, exclude=self.tools.exclude)

    def rules(self) -> tuple[RetrievalRule, ...]:
        """The enabled rules in the order they are tried."""
        named = set(self.order)
        by_name = {entry.name: entry for entry in self.mappings}
        out: list[RetrievalRule] = []
        for name in self.order:
            if name in BUILT_IN:
                rule = table().convention(name).retrieval
                assert rule is not None
                if rule.tool is not None:
                    if self.tools.mode == "off":
                        continue
                    rule = replace(rule, tool=self.tool_match())
                out.append(rule)
            elif name == MAPPING:
                if self.mapping is not None:
                    out.append(self.mapping.rule())
            elif name == MAPPINGS:
                out.extend(entry.rule() for entry in self.mappings if entry.name not in named)
            else:
                out.append(by_name[name].rule())
        return tuple(out)


@dataclass(slots=True)
class Extracted:
    retrieval: Retrieval
    span: SpanRecord
    dropped_contexts: int = 0
    # The other spans of its nest that are not read as retrievals of their own (a retrieval
    # decided before its outer span arrived is not decided again through that span).
    inner: frozenset[bytes] = frozenset()


@dataclass(slots=True)
class _Candidate:
    span: SpanRecord
    found: Found
    rank: int  # the position of the rule that read it in `order`


class Conventions:
    def __init__(self, config: ConventionConfig | None = None, *,
                 clock_tolerance_s: float = DEFAULT_TOLERANCE_NS / 1e9) -> None:
        """`clock_tolerance_s`: how long before a retrieval the LLM span that consumed it may
        seem to start (its host's clock behind the retriever's; answers.py)."""
        self.config = config or ConventionConfig()
        self.tolerance_ns = int(clock_tolerance_s * 1e9)
        self.rules: tuple[RetrievalRule, ...] = self.config.rules()
        self.order: tuple[str, ...] = tuple(rule.name for rule in self.rules)
        self._rank = {name: i for i, name in enumerate(self.order)}
        # Attributes that hold documents: kept out of `Retrieval.attributes`, which sampling rules read.
        prefixes = {source.contexts.key_prefix() for rule in self.rules for source in rule.sources
                    if source.events is None and source.contexts is not None}
        self._payload_prefixes = tuple(sorted(prefixes | set(table().payload_attributes)))
        # Tool spans are recognised whether or not the tool convention is on (the ones not taken
        # are counted, silence.py).
        self.tools = self.config.tool_match()
        self.tools_on = self.config.tools.mode != "off"

    # -- detection (per span) --

    def is_retrieval(self, span: SpanRecord) -> bool:
        """Declared, or carrying documents under an enabled rule."""
        return self._read(span) is not None

    def _read(self, span: SpanRecord) -> Found | None:
        return read_documents(span, self.rules, self.config.max_contexts)

    # -- a trace's retrievals --

    def extract(self, spans: Sequence[SpanRecord], seen: TraceSeen | None = None,
                decided: set[bytes] | frozenset[bytes] = frozenset()) -> list[Extracted]:
        """The retrievals of a trace; `seen` notes the spans each convention matched and the
        tool spans not taken. `decided`: retrieval spans decided at an earlier look, left out
        (and their nests, also when the nest's outer span came since), before their answer is
        looked for."""
        steps = self._extract_steps(spans, seen, decided)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    async def extract_sharing(self, spans: Sequence[SpanRecord], seen: TraceSeen | None, turns: LoopTurns,
                              decided: set[bytes] | frozenset[bytes] = frozenset()) -> list[Extracted]:
        """`extract`, letting the rest of the event loop run whenever `turns` says its slice is
        used up: a trace of 20,000 spans must not hold /healthz for the time it takes."""
        steps = self._extract_steps(spans, seen, decided)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            await turns.share()

    def _extract_steps(self, spans: Sequence[SpanRecord], seen: TraceSeen | None,
                       decided: set[bytes] | frozenset[bytes]) -> Generator[None, None, list[Extracted]]:
        """The work of `extract` in steps of about CHUNK spans or one retrieval each."""
        tree = TraceTree(spans)
        candidates: list[_Candidate] = []
        for start in range(0, len(spans), CHUNK):
            candidates += self._candidates(spans[start:start + CHUNK])
            yield
        if seen is not None:
            self._survey(spans, candidates, seen)
            yield
        if not candidates:
            return []
        yield from answer_index_steps(tree)
        out: list[Extracted] = []
        for group in _nests(candidates, tree):
            chosen_ones = _representatives(group, tree)
            inner = frozenset(c.span.span_id for c in group) - {c.span.span_id for c in chosen_ones}
            if decided and not decided.isdisjoint(inner):
                continue
            for chosen in chosen_ones:
                if chosen.span.span_id in decided:
                    continue
                item = self._extracted(chosen, group, tree)
                item.inner = inner
                out.append(item)
                yield
        out.sort(key=lambda e: e.span.start_time_unix_nano)
        return out

    def count(self, spans: Sequence[SpanRecord], seen: "CountedNests | None" = None,
              survey: TraceSeen | None = None) -> int:
        """How many retrievals `spans` hold, by the same rules as `extract` (for spans that are
        counted, not scored). `seen` remembers the nests counted in earlier requests: a nest
        whose spans come in two requests (the inner retriever span exported before the outer
        one) is counted once. `survey` notes what `extract` notes."""
        tree = TraceTree(spans)
        total = 0
        candidates = self._candidates(spans)
        if survey is not None:
            self._survey(spans, candidates, survey)
        for group in _nests(candidates, tree):
            if seen is not None and seen.add(group, tree):
                continue
            total += len(_representatives(group, tree))
        return total

    def _survey(self, spans: Sequence[SpanRecord], candidates: list[_Candidate], seen: TraceSeen) -> None:
        for c in candidates:
            seen.matched[c.span.service, c.found.convention] += 1
        tools = self.tools
        if tools is None:
            return
        taken = {c.span.span_id for c in candidates}
        for span in spans:
            if span.span_id not in taken and tools.is_tool(span.name, span.attributes):
                name = tools.tool_name(span.name, span.attributes)
                if not tools.internal_tool(name):
                    seen.tools[span.service, name, why_not_taken(tools, self.tools_on, name)] += 1

    def _candidates(self, spans: Sequence[SpanRecord]) -> list[_Candidate]:
        candidates: list[_Candidate] = []
        for span in spans:
            if span.link_only:
                continue
            found = self._read(span)
            if found is not None:
                candidates.append(_Candidate(span, found, self._rank.get(found.convention, len(self._rank))))
        return candidates

    def _extracted(self, chosen: _Candidate, group: list[_Candidate], tree: TraceTree) -> Extracted:
        span, found = chosen.span, chosen.found
        query = found.query or next((c.found.query for c in group if c.found.query), "")
        contexts = seen_by_model(found.contexts, [c.span for c in group], tree) if found.contexts else []
        if found.output is not None:
            answer = Answer(found.output, CHAIN_OUTPUT)
        elif contexts:
            answer = find_answer(span, contexts, tree, self.tolerance_ns)
        elif found.textless:  # documents known by id: a resolver may give their text
            answer = find_answer(span, found.contexts, tree, self.tolerance_ns)
        else:
            answer = NO_ANSWER
        retrieval = Retrieval(
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            service=span.service,
            query=query,
            contexts=contexts,
            retriever=self._retriever_name(span),
            output=answer.text,
            expected_output=self._expected_output(span, tree),
            attributes=rule_attributes(span.attributes, self._payload_prefixes),
            end_time_unix_nano=span.end_time_unix_nano,
            convention=found.convention,
            answer_source=answer.source,
            answer_clean=answer.clean,
            resource=span.resource,
            documents_without_text=found.without_text or _content_off(group),
            textless=found.textless,
        )
        return Extracted(retrieval, span, found.dropped)

    def _retriever_name(self, span: SpanRecord) -> str:
        key = self.config.retriever_attribute
        for candidate in (key, TRACELOOP_NAME):
            if candidate:
                value = span.attributes.get(candidate)
                if value is not None and value != "":
                    return str(value)
        return span.name

    def _expected_output(self, span: SpanRecord, tree: TraceTree) -> str | None:
        key = self.config.expected_output_attribute
        if not key:
            return None
        value = span.attributes.get(key)
        if isinstance(value, str) and value:
            return value
        # The trace's own (roots first), looked up once per trace, not once per retrieval.
        memo = ("expected_output", key)
        if memo not in tree.memo:
            tree.memo[memo] = next((v for s in (*tree.roots(), *(s for s in tree.spans if not s.is_root))
                                    if isinstance(v := s.attributes.get(key), str) and v), None)
        return tree.memo[memo]


@dataclass(slots=True)
class _Counted:
    spans: set[bytes] = field(default_factory=set)  # retrieval spans of counted nests
    ancestors: set[bytes] = field(default_factory=set)  # their ancestors' ids (a missing parent's too)


class CountedNests:
    """The retrieval spans already counted per trace, and their ancestors, for the counting of
    unsampled spans across requests; bounded (the oldest traces are forgotten first).

    A nest counted without documents whose parent is not in its request (LlamaIndex's inner
    `_retrieve` span, exported before the `retrieve` span around it) leaves that parent's id
    `pending`: a later request holding it must be looked at span by span, because its exact
    byte count would count the outer span as a second retrieval."""

    PENDING_S = 10.0  # an exporter sends the outer span within its batch delay, seconds

    def __init__(self, max_traces: int = 4096, max_ids: int = 256, max_pending: int = 64,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._traces: OrderedDict[bytes, _Counted] = OrderedDict()
        self._max_traces = max_traces
        self._max_ids = max_ids
        self._max_pending = max_pending
        self._clock = clock
        self.pending: OrderedDict[bytes, float] = OrderedDict()  # framed span id -> when

    def add(self, group: list[_Candidate], tree: TraceTree) -> bool:
        """Records the nest `group`; True when it belongs to a nest counted before (one of its
        spans was counted, is an ancestor of a counted span, or has a counted span among its
        ancestors)."""
        trace = group[0].span.trace_id
        counted = self._traces.get(trace)
        ids = {c.span.span_id for c in group}
        ancestors: set[bytes] = set()
        missing: list[bytes] = []
        for c in group:
            chain = list(tree.ancestors(c.span))
            ancestors.update(a.span_id for a in chain)
            top = chain[-1] if chain else c.span
            if top.parent_span_id and top.parent_span_id not in ids:
                ancestors.add(top.parent_span_id)  # the parent that is not in this request
                missing.append(top.parent_span_id)
        before = counted is not None and bool(ids & (counted.spans | counted.ancestors) or ancestors & counted.spans)
        for span_id in ids:
            self.pending.pop(_framed_id(span_id), None)  # the span we waited for is here
        if counted is None:
            counted = self._traces[trace] = _Counted()
            while len(self._traces) > self._max_traces:
                self._traces.popitem(last=False)
        else:
            self._traces.move_to_end(trace)
        if len(counted.spans) + len(counted.ancestors) < self._max_ids:
            counted.spans |= ids
            counted.ancestors |= ancestors
        if not before and not any(c.found.contexts for c in group):
            now = self._clock()
            for parent in missing:
                self.pending[_framed_id(parent)] = now
            while len(self.pending) > self._max_pending:
                self.pending.popitem(last=False)
        return before

    def waited_for_in(self, data: bytes | memoryview) -> bool:
        """Whether `data` holds a span a counted nest is waiting for (its missing parent)."""
        if not self.pending:
            return False
        oldest = self._clock() - self.PENDING_S
        while self.pending and next(iter(self.pending.values())) < oldest:
            self.pending.popitem(last=False)
        raw = bytes(data) if isinstance(data, memoryview) else data
        return any(marker in raw for marker in self.pending)


def _framed_id(span_id: bytes) -> bytes:
    """A span id as `Span.span_id` (field 2, 8 bytes) is written."""
    return b"\x12" + bytes([len(span_id)]) + span_id


def _nests(candidates: list[_Candidate], tree: TraceTree) -> list[list[_Candidate]]:
    """Candidates grouped by nesting (one contains the other, transitively)."""
    parent = list(range(len(candidates)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    index = {c.span.span_id: i for i, c in enumerate(candidates)}
    for i, candidate in enumerate(candidates):
        for ancestor in tree.ancestors(candidate.span):
            j = index.get(ancestor.span_id)
            if j is not None:
                parent[find(i)] = find(j)
    groups: dict[int, list[_Candidate]] = {}
    for i, candidate in enumerate(candidates):
        groups.setdefault(find(i), []).append(candidate)
    return list(groups.values())


def _content_off(group: list[_Candidate]) -> int:
    """1 when no span of a nest recorded a query or a documents key (content capture off): the
    retrieval is decided `no_content`, not `no_contexts`."""
    return int(all(c.found.content_off for c in group))


def _representatives(group: list[_Candidate], tree: TraceTree) -> list[_Candidate]:
    """The spans a nest is read from: its outermost spans with documents under the earliest rule
    in `order` (declared ones first), or, when none has documents, its outermost span (one whose
    documents carry no text first)."""
    with_documents = [c for c in group if c.found.contexts]
    if with_documents:
        first = min(c.rank for c in with_documents)
        with_documents = [c for c in with_documents if c.rank == first]
        pool = [c for c in with_documents if c.found.declared] or with_documents
    else:
        pool = [c for c in group if c.found.without_text] or group
    ids = {c.span.span_id for c in pool}
    # `or pool[:1]`: hostile ids (repeated span ids, cycles) can leave no span without an ancestor.
    outermost = [c for c in pool if not any(a.span_id in ids for a in tree.ancestors(c.span))] or pool[:1]
    if with_documents:
        return outermost
    return [min(outermost, key=lambda c: c.span.start_time_unix_nano)]


def rule_attributes(attributes: dict[str, Any], payload_prefixes: tuple[str, ...] = ()) -> dict[str, Any]:
    """Small scalar attributes of the retrieval span (what sampling rules match on); attributes
    that hold documents or prompts (`payload_prefixes`) are left out."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if payload_prefixes and key.startswith(payload_prefixes):
            continue
        if isinstance(value, str):
            if len(value) > _MAX_RULE_VALUE_CHARS:
                continue
        elif not isinstance(value, (bool, int, float)):
            continue
        out[key] = value
        if len(out) >= _MAX_RULE_ATTRIBUTES:
            break
    return out
