"""Silence made visible: what assembly saw and did not take as a retrieval, per service.

An app whose retrievals no convention reads gets no decision at all, and nothing would say so.
So, per service:
- the spans each convention matched (decoded ones: sampled traces, and unsampled spans looked
  at; unsampled spans counted by their bytes under the convention whose marker counted them);
- LLM spans in sampled traces where no retrieval was found
  (`ctxprec_llm_spans_without_retrieval_total`): the app calls a model and retrieves in a way
  no convention reads;
- tool-call spans seen and not taken (`ctxprec_tool_spans_not_taken_total{tool}`, at most
  `max_tools` names a service, the rest `other`), each logged once per service and tool with
  the setting that would take it.
`/diagnostics/conventions` lists them (`view`).
"""
from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ctxprec.collector.assembly.answers import is_llm_span
from ctxprec.collector.assembly.spans import SpanRecord
from ctxprec.collector.assembly.table import ToolMatch
from ctxprec.collector.metrics.children import Children
from ctxprec.collector.metrics.children import OTHER
from ctxprec.collector.metrics.registry import Metrics

log = logging.getLogger("ctxprec.conventions")

MAX_TOOLS = 50  # tool names kept per service; the rest are counted as `other`
_MAX_NAME_CHARS = 128

# Why a tool span was not taken, and what would take it.
EXCLUDED = "excluded"
OFF = "tools_off"
NOT_DOCUMENTS = "not_documents"
_WHY = {
    EXCLUDED: ("it matches conventions.tools.exclude", "remove {tool} from conventions.tools.exclude"),
    OFF: ("conventions.tools.mode is off", "set conventions.tools.mode: auto"),
    NOT_DOCUMENTS: ("its result is not a list of documents",
                    "add {tool} to conventions.tools.include (or read it with a conventions.mappings entry)"),
}


def _tool_view(tool: str, spans: int, why: str) -> dict[str, Any]:
    if tool == OTHER:
        return {"tool": tool, "spans": spans, "why": f"tool names past the first {MAX_TOOLS} of the service",
                "to_take_it": "the log names each of the first ones; conventions.tools.include takes any by name"}
    return {"tool": tool, "spans": spans, "why": _WHY[why][0], "to_take_it": _WHY[why][1].format(tool=repr(tool))}


def why_not_taken(tools: ToolMatch, tools_on: bool, name: str) -> str:
    return OFF if not tools_on else EXCLUDED if tools.excluded(name) else NOT_DOCUMENTS


@dataclass(slots=True)
class TraceSeen:
    """What one batch of decoded spans showed (filled by `Conventions.extract` and `count`)."""

    matched: Counter[tuple[str, str]] = field(default_factory=Counter)  # (service, convention) -> spans
    tools: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (service, tool, why) -> spans


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, Any]


@dataclass(slots=True)
class _Service:
    conventions: Counter[str] = field(default_factory=Counter)
    llm_without_retrieval: int = 0
    tools: dict[str, list[Any]] = field(default_factory=dict)  # name -> [spans, why]


class ConventionStats:
    def __init__(self, metrics: Metrics, *, tools_on: bool = True, max_tools: int = MAX_TOOLS) -> None:
        self._metrics = metrics
        self._tools_on = tools_on
        self._max_tools = max_tools
        self._services: dict[str, _Service] = {}
        self._lock = threading.Lock()  # the view is read from the metrics server's handler
        self._llm = Children(metrics.llm_spans_without_retrieval)
        self._not_taken = Children(metrics.tool_spans_not_taken)

    def trace(self, spans: Iterable[SpanRecord], retrievals: int, seen: TraceSeen) -> None:
        """A sampled trace read: `retrievals` found in it, `seen` what extraction noted."""
        if not retrievals:
            llm = Counter(span.service for span in spans if is_llm_span(span))
            for service, count in llm.items():
                label = self._metrics.service(service)
                self._llm(label).inc(count)
                with self._lock:
                    self._service(label).llm_without_retrieval += count
        self.add(seen)

    def add(self, seen: TraceSeen) -> None:
        if not seen.matched and not seen.tools:
            return
        with self._lock:
            for (service, convention), count in seen.matched.items():
                self._service(self._metrics.service(service)).conventions[convention] += count
            for (service, tool, why), count in seen.tools.items():
                label = self._metrics.service(service)
                entry = self._service(label).tools
                tool = tool[:_MAX_NAME_CHARS]  # a label value, from outside
                name = tool if tool in entry or len(entry) < self._max_tools else OTHER
                first = name not in entry
                held = entry.setdefault(name, [0, why])
                held[0] += count
                self._not_taken(label, name).inc(count)
                if first and name != OTHER:
                    reason, remedy = _WHY[why]
                    log.warning("service %s: tool %r was called and not read as a retrieval (%s); to score it, %s",
                                label, tool, reason, remedy.format(tool=repr(tool)))

    def counted(self, service: str, convention: str, count: int) -> None:
        """Unsampled retrieval spans counted by their bytes under `convention`'s marker."""
        with self._lock:
            self._service(self._metrics.service(service)).conventions[convention] += count

    def _service(self, label: str) -> _Service:
        found = self._services.get(label)
        if found is None:
            found = self._services[label] = _Service()
        return found

    # -- /diagnostics/conventions --

    def view(self, params: Mapping[str, str]) -> Answer:
        """`?service=`: per service, the spans each convention matched, the LLM spans in sampled
        traces without a retrieval, and the tools seen and not taken (why, and what would take them)."""
        wanted = params.get("service") or None
        with self._lock:
            services = [
                {"service": name,
                 "conventions": dict(sorted(entry.conventions.items())),
                 "llm_spans_without_retrieval": entry.llm_without_retrieval,
                 "tools_not_taken": [_tool_view(tool, spans, why) for tool, (spans, why) in sorted(entry.tools.items())]}
                for name, entry in sorted(self._services.items()) if wanted is None or name == wanted]
        return Answer(200, {"tools_mode": "auto" if self._tools_on else "off", "services": services})
