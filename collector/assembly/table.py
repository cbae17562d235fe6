"""The conventions table (conventions.yaml), read once, checked, and compiled into rules.

Everything assembly knows about a built-in convention is in that file: how a retrieval span is
recognised and read (documents.py), which spans are LLM calls and where their answer is
(answers.py), what the byte-level count of unsampled spans looks for (markers.py), and the
per-convention section of docs/FORMATS.md (conventions_docs.py). User mappings (the config's
`conventions.mapping` and `conventions.mappings`) compile into the same `RetrievalRule`, so they
are read by the same code.
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ctxprec.collector.assembly.specs import Condition, Spec, conditions, parse_spec, parse_specs

TABLE_PATH = Path(__file__).with_name("conventions.yaml")

Require = Literal["key", "list", "documents"]
Marker = Literal["count", "look", "none"]


# -- compiled rules --

@dataclass(frozen=True, slots=True)
class Source:
    """One place a convention reads documents from. Without `contexts`, its documents are
    known by their ids alone (text to be looked up by a resolver)."""

    contexts: Spec | None
    ids: Spec | None = None
    scores: tuple[Spec, ...] = ()
    metadata: Spec | None = None
    events: str | None = None  # read span events of this name; the specs are event attribute keys
    documents_only: bool = False
    require: Require = "key"
    marker: Marker = "look"
    # For `{i}` patterns, made once: what all their keys start with, and one regex whose group n
    # holds the rank when a key fits the n-th spec (contexts, ids, scores..., metadata).
    rank_prefix: str = field(init=False, compare=False, repr=False)
    rank_regex: re.Pattern[str] = field(init=False, compare=False, repr=False)
    rank_mixed: bool = field(init=False, compare=False, repr=False)  # a spec beside the patterns is not one

    @property
    def rank_specs(self) -> tuple[Spec | None, ...]:
        return (self.contexts, self.ids, *self.scores, self.metadata)

    def __post_init__(self) -> None:
        patterns = [s for s in self.rank_specs if s is not None and s.pattern]
        alternatives = [f"{re.escape(s.prefix or '')}(\\d{{1,9}}){re.escape(s.suffix)}"
                        if s is not None and s.pattern else "(?!)()"  # keeps the groups in step
                        for s in self.rank_specs]
        object.__setattr__(self, "rank_prefix", os.path.commonprefix([s.key_prefix() for s in patterns]))
        object.__setattr__(self, "rank_regex", re.compile("^(?:" + "|".join(alternatives) + ")$"))
        object.__setattr__(self, "rank_mixed", any(s is not None and not s.pattern for s in self.rank_specs))


@dataclass(frozen=True, slots=True)
class ToolMatch:
    """Which spans are tool calls, the tool's name, and which tools are taken (`conventions.tools`).

    A tool span is a retrieval when its result is a list of document-shaped items; a tool named
    in `include` is taken whatever its result, one named in `exclude` never."""

    declared: tuple[Condition, ...]  # any one says the span is a tool call
    names: tuple[Spec, ...]  # where the tool's name is (else the span name)
    query_fields: tuple[str, ...]  # argument names that hold the question, first found wins
    internal: tuple[str, ...] = ()  # frameworks' own tools (globs): neither taken nor counted
    include: tuple[str, ...] = ()  # globs
    exclude: tuple[str, ...] = ()
    _include: re.Pattern[str] | None = field(init=False, compare=False, repr=False)
    _exclude: re.Pattern[str] | None = field(init=False, compare=False, repr=False)
    _internal: re.Pattern[str] | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_include", _globs(self.include))
        object.__setattr__(self, "_exclude", _globs(self.exclude))
        object.__setattr__(self, "_internal", _globs(self.internal))

    def is_tool(self, name: str, attributes: Mapping[str, Any]) -> bool:
        return any(c.holds(name, attributes) for c in self.declared)

    def tool_name(self, span_name: str, attributes: Mapping[str, Any]) -> str:
        for spec in self.names:
            value = attributes.get(spec.key)
            if isinstance(value, str) and value:
                return value
        return span_name

    def included(self, tool: str) -> bool:
        return self._include is not None and self._include.match(tool) is not None

    def excluded(self, tool: str) -> bool:
        return self._exclude is not None and self._exclude.match(tool) is not None

    def internal_tool(self, tool: str) -> bool:
        """A framework's own tool (smolagents' `final_answer`), unless `include` names it."""
        return self._internal is not None and self._internal.match(tool) is not None and not self.included(tool)


def _globs(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(fnmatch.translate(p) for p in patterns)) if patterns else None


@dataclass(frozen=True, slots=True)
class RetrievalRule:
    name: str
    declared: tuple[Condition, ...] = ()
    when: tuple[Condition, ...] = ()
    sources: tuple[Source, ...] = ()
    query: tuple[Spec, ...] = ()
    output: Spec | None = None  # user mappings only: the answer on the retrieval span itself
    built_in: bool = True
    # A span that matches `when` is a retrieval even without documents (user mappings say so).
    when_declares: bool = False
    # Tool spans: read only when one of its `declared` holds, documents only when document-shaped,
    # the query from the call's arguments.
    tool: ToolMatch | None = None


@dataclass(frozen=True, slots=True)
class AnswerSource:
    value: Spec | None = None  # an attribute read as text
    as_written: bool = False
    strip_prefix: str | None = None
    messages: re.Pattern[str] | None = None  # indexed messages: groups (index, field, part...)
    role: str | None = None  # the field of a message that holds its role
    messages_text: str = ""  # as written, for the docs
    # The content fields of a message, as regexes over the field: alternatives, the first a
    # message has wins (OpenInference writes a Responses API message both as `content` and as
    # `contents.{j}` parts: one answer, not two).
    content_fields: tuple[re.Pattern[str], ...] = ()

    @property
    def keys_prefix(self) -> str:
        if self.value is not None:
            return self.value.key
        return self.messages_text.partition("{i}")[0]


@dataclass(frozen=True, slots=True)
class LlmRule:
    name: str
    declared: tuple[Condition, ...] = ()
    present: tuple[Spec, ...] = ()
    exclusive: bool = False
    prompt: tuple[str, ...] = ()
    answers: tuple[AnswerSource, ...] = ()


@dataclass(frozen=True, slots=True)
class Convention:
    name: str
    title: str
    emitted_by: str
    retrieval: RetrievalRule | None
    llm: LlmRule | None
    chain_output: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Reranking:
    """A span that outputs the documents the model saw, by id (a re-ranker, a post-processor)."""

    declared: tuple[Condition, ...] = ()  # any one says the span re-ranks (empty: any span)
    ids: Spec | None = None  # an `{i}` pattern or an attribute holding the ids in order
    ids_in_text: re.Pattern[str] | None = None  # else: ids found in an attribute's text, group 1
    text_key: str | None = None
    text_marker: str | None = None  # the text must contain this before the regex is run


@dataclass(frozen=True, slots=True)
class AnswerFraming:
    """Field markers some frameworks write around an answer (DSPy's `[[ ## answer ## ]]`)."""

    marker: re.Pattern[str]  # group 1: the field's name
    end_fields: frozenset[str]
    skip_fields: frozenset[str]


@dataclass(frozen=True)
class Table:
    conventions: tuple[Convention, ...]
    index_names: tuple[str, ...]  # globs
    index_attributes: tuple[Condition, ...]
    payload_attributes: tuple[str, ...]
    document_containers: tuple[str, ...]
    document_text_fields: tuple[str, ...]
    redacted_texts: frozenset[str]
    reranking: tuple[Reranking, ...] = ()
    answer_framing: tuple[AnswerFraming, ...] = ()

    def convention(self, name: str) -> Convention:
        for convention in self.conventions:
            if convention.name == name:
                return convention
        raise KeyError(name)

    @property
    def retrieval_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.conventions if c.retrieval is not None)

    @property
    def tool_rule(self) -> RetrievalRule | None:
        """The convention that reads tool spans (`conventions.tools` configures it)."""
        return next((c.retrieval for c in self.conventions if c.retrieval is not None and c.retrieval.tool), None)

    @property
    def llm_rules(self) -> tuple[LlmRule, ...]:
        return tuple(c.llm for c in self.conventions if c.llm is not None)

    @property
    def answers(self) -> tuple[AnswerSource, ...]:
        """Every answer source, in table order (the first that reads a span's answer wins)."""
        return tuple(a for rule in self.llm_rules for a in rule.answers)

    @property
    def answer_prefixes(self) -> tuple[str, ...]:
        """Keys (or key prefixes) that hold an answer: never part of a prompt."""
        keys = [a.keys_prefix for a in self.answers] + [k for c in self.conventions for k in c.chain_output]
        return tuple(dict.fromkeys(keys))

    @property
    def chain_outputs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for c in self.conventions for k in c.chain_output))

    @cached_property
    def _index_names(self) -> re.Pattern[str] | None:
        return re.compile("|".join(fnmatch.translate(p) for p in self.index_names)) if self.index_names else None

    def index_building(self, name: str, attributes: Mapping[str, Any]) -> bool:
        """A span that makes documents while building an index (never a built-in retrieval)."""
        if any(c.holds(name, attributes) for c in self.index_attributes):
            return True
        names = self._index_names
        if names is None:
            return False
        entity = attributes.get("traceloop.entity.name")
        return names.match(name) is not None or (isinstance(entity, str) and names.match(entity) is not None)


# -- the file's schema --

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _SourceModel(_Strict):
    contexts: str | None = None  # span events may name ids alone (documents without text)
    ids: str | None = None
    scores: list[str] = Field(default_factory=list)
    metadata: str | None = None
    events: str | None = None
    documents_only: bool = False
    require: Require = "key"
    marker: Marker = "look"


class _ToolModel(_Strict):
    declared: dict[str, list[str]] = Field(min_length=1)
    name: list[str] = Field(default_factory=list)
    query_fields: list[str] = Field(default_factory=list)
    internal: list[str] = Field(default_factory=list)


class _RetrievalModel(_Strict):
    declared: dict[str, list[str]] = Field(default_factory=dict)
    when: dict[str, list[str]] = Field(default_factory=dict)
    tool: _ToolModel | None = None
    documents: list[_SourceModel]
    query: list[str] = Field(default_factory=list)


class _AnswerModel(_Strict):
    value: str | None = None
    as_written: bool = False
    strip_prefix: str | None = None
    messages: str | None = None
    role: str | None = None
    content: list[str] = Field(default_factory=list)


class _LlmModel(_Strict):
    declared: dict[str, list[str]] = Field(default_factory=dict)
    present: list[str] = Field(default_factory=list)
    exclusive: bool = False
    prompt: list[str] = Field(default_factory=list)
    answer: list[_AnswerModel]


class _ConventionModel(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    title: str
    emitted_by: str
    retrieval: _RetrievalModel | None = None
    llm: _LlmModel | None = None
    chain_output: list[str] = Field(default_factory=list)


class _IndexBuildingModel(_Strict):
    names: list[str] = Field(default_factory=list)
    attributes: dict[str, list[str]] = Field(default_factory=dict)


class _RerankingModel(_Strict):
    declared: dict[str, list[str]] = Field(default_factory=dict)
    ids: str | None = None
    ids_in_text: str | None = None
    text: str | None = None
    text_marker: str | None = None


class _FramingModel(_Strict):
    marker: str
    end_fields: list[str] = Field(default_factory=list)
    skip_fields: list[str] = Field(default_factory=list)


class _TableModel(_Strict):
    index_building: _IndexBuildingModel
    payload_attributes: list[str] = Field(default_factory=list)
    document_containers: list[str] = Field(default_factory=list)
    document_text_fields: list[str] = Field(min_length=1)
    redacted_texts: list[str] = Field(default_factory=list)
    reranking: list[_RerankingModel] = Field(default_factory=list)
    answer_framing: list[_FramingModel] = Field(default_factory=list)
    conventions: list[_ConventionModel]

    @field_validator("conventions")
    @classmethod
    def _unique(cls, value: list[_ConventionModel]) -> list[_ConventionModel]:
        names = [c.name for c in value]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"convention names must be unique: {', '.join(duplicates)}")
        return value


def compile_source(raw: _SourceModel) -> Source:
    if raw.contexts is None and (raw.events is None or raw.ids is None):
        raise ValueError("a documents source without `contexts` reads span `events` and names their `ids`")
    return Source(
        contexts=parse_spec(raw.contexts) if raw.contexts is not None else None,
        ids=parse_spec(raw.ids) if raw.ids else None,
        scores=parse_specs(raw.scores),
        metadata=parse_spec(raw.metadata) if raw.metadata else None,
        events=raw.events,
        documents_only=raw.documents_only,
        require=raw.require,
        marker=raw.marker,
    )


def _messages_pattern(prefix_pattern: str, role: str | None, content: list[str]) -> re.Pattern[str]:
    """`llm.output_messages.{i}.message.` + role `role` + content [`content`,
    `contents.{j}.message_content.text`] -> a regex with groups (index, field, part)."""
    head = re.escape(prefix_pattern).replace(re.escape("{i}"), r"(\d{1,6})")
    fields = [re.escape(role)] if role else []
    for item in content:
        fields.append(re.escape(item).replace(re.escape("{j}"), r"(\d{1,6})"))
    alternatives = "|".join(fields)
    return re.compile(f"^{head}({alternatives})$")


def _compile_answer(raw: _AnswerModel) -> AnswerSource:
    if (raw.value is None) == (raw.messages is None):
        raise ValueError("an answer source has either `value` or `messages`")
    if raw.messages is not None:
        if not raw.content:
            raise ValueError(f"messages {raw.messages!r}: `content` is missing")
        fields = tuple(re.compile(re.escape(c).replace(re.escape("{j}"), r"\d{1,6}")) for c in raw.content)
        return AnswerSource(messages=_messages_pattern(raw.messages, raw.role, raw.content), role=raw.role,
                            messages_text=raw.messages, content_fields=fields)
    assert raw.value is not None
    return AnswerSource(value=parse_spec(raw.value), as_written=raw.as_written, strip_prefix=raw.strip_prefix)


def _compile_reranking(raw: _RerankingModel) -> Reranking:
    if (raw.ids is None) == (raw.ids_in_text is None):
        raise ValueError("a reranking entry has either `ids` or `ids_in_text` (with `text`)")
    if raw.ids_in_text is not None:
        if raw.text is None:
            raise ValueError("reranking: `ids_in_text` needs `text`, the attribute it is found in")
        pattern = re.compile(raw.ids_in_text)
        if pattern.groups != 1:
            raise ValueError(f"reranking: {raw.ids_in_text!r} must have exactly one group (the id)")
        return Reranking(conditions(raw.declared), None, pattern, raw.text, raw.text_marker)
    assert raw.ids is not None
    return Reranking(conditions(raw.declared), parse_spec(raw.ids))


def _compile_framing(raw: _FramingModel) -> AnswerFraming:
    pattern = re.compile(raw.marker)
    if pattern.groups != 1:
        raise ValueError(f"answer_framing: {raw.marker!r} must have exactly one group (the field's name)")
    return AnswerFraming(pattern, frozenset(raw.end_fields), frozenset(raw.skip_fields))


def _compile_tool(raw: _ToolModel) -> ToolMatch:
    return ToolMatch(conditions(raw.declared), parse_specs(raw.name), tuple(raw.query_fields), tuple(raw.internal))


def _compile(model: _TableModel) -> Table:
    conventions: list[Convention] = []
    for raw in model.conventions:
        retrieval = None
        if raw.retrieval is not None:
            r = raw.retrieval
            retrieval = RetrievalRule(
                name=raw.name, declared=conditions(r.declared), when=conditions(r.when),
                sources=tuple(compile_source(s) for s in r.documents), query=parse_specs(r.query),
                tool=_compile_tool(r.tool) if r.tool is not None else None)
        llm = None
        if raw.llm is not None:
            m = raw.llm
            llm = LlmRule(name=raw.name, declared=conditions(m.declared), present=parse_specs(m.present),
                          exclusive=m.exclusive, prompt=tuple(m.prompt),
                          answers=tuple(_compile_answer(a) for a in m.answer))
        conventions.append(Convention(raw.name, raw.title, raw.emitted_by, retrieval, llm, tuple(raw.chain_output)))
    return Table(tuple(conventions), tuple(model.index_building.names), conditions(model.index_building.attributes),
                 tuple(model.payload_attributes), tuple(model.document_containers),
                 tuple(model.document_text_fields), frozenset(model.redacted_texts),
                 tuple(_compile_reranking(r) for r in model.reranking),
                 tuple(_compile_framing(f) for f in model.answer_framing))


def parse_table(text: str, source: str = "conventions table") -> Table:
    """A table from YAML text; ValueError naming the entry and field that is wrong."""
    try:
        raw = yaml.safe_load(text)
        return _compile(_TableModel.model_validate(raw))
    except ValidationError as exc:
        problems = ["{}: {}".format(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()[:3]]
        raise ValueError(f"{source}: {'; '.join(problems)}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise ValueError(f"{source}: {exc}") from None


@cache
def table() -> Table:
    """The built-in table (conventions.yaml), loaded on first use."""
    return parse_table(TABLE_PATH.read_text(encoding="utf-8"), str(TABLE_PATH.name))
