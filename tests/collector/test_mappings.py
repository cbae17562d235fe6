"""`conventions.mappings` and `conventions.order` on captured spans (tests/fixtures/otlp), and the
conventions table as the one source of the rules: a bad table or mapping is refused with a message
naming what is wrong, and a convention added to a table is read and counted without code."""
from __future__ import annotations

from typing import Any

import pytest
import yaml
from ctxprec.collector.assembly.conventions import ConventionConfig, Conventions
from ctxprec.collector.assembly.documents import read_documents
from ctxprec.collector.assembly.markers import MarkerScanner
from ctxprec.collector.assembly.spans import SpanRecord, span_record
from ctxprec.collector.assembly.table import parse_table, table
from ctxprec.collector import config as config_module
from ctxprec.collector.config import ConfigError
from pydantic import ValidationError

from tests.collector.test_captured_spans import DOCS, documented_mappings, requests
from tests.collector.test_config import parse

VECTOR_OPERATION = """
mappings:
  - name: vector-operation
    when: {span.name: rag_vector_operation searchDocs}
    query: mastra.rag_vector_operation.input$.topK
    contexts: mastra.rag_vector_operation.output$.documents
"""


def spans_of(name: str) -> list[SpanRecord]:
    return [span_record(s, "svc", 20_000) for request, _ in requests(name)
            for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def config(text: str, **more: Any) -> ConventionConfig:
    return ConventionConfig(**{**yaml.safe_load(text), **more})


def test_a_nest_read_by_two_conventions_is_one_retrieval_read_by_the_first_in_order() -> None:
    """The mapping matches the vector tool's child span (no documents of its own there: a
    retrieval without contexts), the built-in `mastra` convention the tool span around it."""
    spans = spans_of("mastra171-vector")
    first = Conventions(config(VECTOR_OPERATION, order=["mastra", "mappings"])).extract(spans)
    assert [(e.retrieval.convention, e.span.name) for e in first] == [("mastra", "execute_tool searchDocs")]
    assert [c.content for c in first[0].retrieval.contexts] == DOCS[::-1]
    # The mapping first: it finds no documents, so the nest is still read where documents are.
    second = Conventions(config(VECTOR_OPERATION, order=["vector-operation", "mastra"])).extract(spans)
    assert [(e.retrieval.convention, e.span.name) for e in second] == [("mastra", "execute_tool searchDocs")]


def test_findings_on_one_span_are_read_by_the_first_convention_in_order() -> None:
    mapping = """
mappings:
  - name: tool-sources
    when: {gen_ai.tool.name: searchDocs}
    query: gen_ai.tool.call.arguments$.queryText
    contexts: gen_ai.tool.call.result$.sources[*].metadata.text
"""
    spans = spans_of("mastra171-vector")
    [by_mapping] = Conventions(config(mapping)).extract(spans)  # the default order puts mappings first
    assert by_mapping.retrieval.convention == "tool-sources"
    assert [c.id for c in by_mapping.retrieval.contexts] == [None, None, None]  # this mapping reads no ids
    [by_mastra] = Conventions(config(mapping, order=["mastra", "mappings"])).extract(spans)
    assert by_mastra.retrieval.convention == "mastra"
    assert [c.id for c in by_mastra.retrieval.contexts] == ["doc-2", "doc-1", "doc-0"]


def test_a_mappings_entry_with_ids_alone_reads_documents_known_by_id() -> None:
    """No `contexts`: the documents are the ids, in rank order, without text (a resolver looks
    their text up). (Where another convention
    reads the same span's documents with their text, that one wins: here it is left out.)"""
    spans = spans_of("mastra171-vector")
    by_path = """
mappings:
  - name: tool-ids
    when: {gen_ai.tool.name: searchDocs}
    query: gen_ai.tool.call.arguments$.queryText
    ids: gen_ai.tool.call.result$.sources[*].id
"""
    [found] = Conventions(config(by_path, order=["tool-ids"])).extract(spans)
    r = found.retrieval
    assert (r.convention, r.contexts, r.documents_without_text) == ("tool-ids", [], 3)
    assert [(d.id, d.content, d.position) for d in r.textless] == [("doc-2", "", None), ("doc-1", "", None),
                                                                    ("doc-0", "", None)]
    assert r.query


def test_a_mapping_that_names_an_index_building_span_reads_it() -> None:
    spans = spans_of("llamaindex-openllmetry-indexbuild")
    assert [e.span.name for e in Conventions().extract(spans)] == ["VectorIndexRetriever.task"]
    splitter = """
mappings:
  - name: splitter
    when: {traceloop.entity.name: SentenceSplitter.workflow}
    query: traceloop.entity.input$.nodes[0]
    contexts: traceloop.entity.output
"""
    found = Conventions(config(splitter)).extract(spans)
    names = sorted(e.span.name for e in found)
    assert names == ["SentenceSplitter.workflow", "VectorIndexRetriever.task"]
    [split] = [e for e in found if e.span.name == "SentenceSplitter.workflow"]
    assert len(split.retrieval.contexts) == 8  # the corpus's eight documents, as nodes


def test_when_values_lists_numbers_and_booleans_compare_as_text() -> None:
    spans = spans_of("mastra171-workflow")
    text = """
mappings:
  - name: steps
    when: {mastra.workflow_step.step_id: [retrieve, fetch], mastra.workflow_step.status: success}
    query: mastra.workflow_step.input$.question
    contexts: mastra.workflow_step.output$.documents[*].text
"""
    [found] = Conventions(config(text)).extract(spans)
    assert found.span.name == "workflow_step retrieve"
    none = text.replace("status: success", "status: failed")
    assert Conventions(config(none)).extract(spans) == []


@pytest.mark.parametrize(("conventions", "message"), [
    ({"order": ["openinference", "nope"]}, "unknown convention 'nope'"),
    ({"mappings": [{"name": "m", "when": {"a": "b"}, "query": "q", "contexts": "c"}], "order": ["genai"]},
     "mappings entry 'm' is not in conventions.order"),
    ({"mappings": [{"name": "genai", "when": {"a": "b"}, "query": "q", "contexts": "c"}]}, "built-in"),
    ({"mappings": [{"name": "m", "when": {}, "query": "q", "contexts": "c"}]}, "when"),
    ({"mappings": [{"name": "m", "when": {"a": "b"}, "query": "q", "contexts": "c$documents"}]},
     "the JSON path must be made of"),
    ({"mapping": {"query": "q"}}, "contexts"),  # a mappings entry may leave them out, the single mapping not
    ({"order": ["genai", "genai"]}, "listed twice"),
])
def test_bad_mappings_are_refused_naming_what_is_wrong(conventions: dict[str, Any], message: str,
                                                       tmp_path: Any) -> None:
    path = tmp_path / "ctxprec.yaml"
    path.write_text(yaml.safe_dump({"conventions": conventions}), encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        config_module.load(parse("--config", str(path)), environ={})
    assert message in str(error.value) and "conventions" in str(error.value)


def test_the_documented_example_loads_from_a_config_file(tmp_path: Any) -> None:
    path = tmp_path / "ctxprec.yaml"
    path.write_text(yaml.safe_dump({"conventions": yaml.safe_load(documented_mappings())}), encoding="utf-8")
    loaded = config_module.load(parse("--config", str(path)), environ={})
    [rule] = [r for r in loaded.conventions.rules() if r.name == "retrieve-step"]
    assert not rule.built_in and rule.when_declares


NEW_TABLE = """
index_building: {names: [], attributes: {}}
document_text_fields: [body]
conventions:
  - name: acme
    title: Acme RAG
    emitted_by: a made-up SDK
    retrieval:
      declared: {acme.kind: [search]}
      documents:
        - contexts: acme.hits$.items[*]
          ids: acme.hits$.items[*].key
          marker: none
      query: [acme.question]
"""


def test_a_convention_added_to_a_table_is_read_and_counted_without_code() -> None:
    from tests.collector.test_not_sampled_counting import request_with
    from tests.helpers.rag_traces import span, trace_id

    acme = parse_table(NEW_TABLE).convention("acme").retrieval
    assert acme is not None
    attributes = {"acme.kind": "search", "acme.question": "why?",
                  "acme.hits": '{"items": [{"text": "first", "key": "k1"}, {"content": "second", "key": "k2"}]}'}
    one = span(trace_id(True), "search", attributes)
    found = read_documents(span_record(one, "svc", 20_000), [acme], 10)
    assert found is not None and found.query == "why?"
    # `document_text_fields` of the built-in table reads `text` and `content`.
    assert [(c.content, c.id) for c in found.contexts] == [("first", "k1"), ("second", "k2")]
    scanner = MarkerScanner([acme])
    data = request_with([("svc", [one, span(trace_id(True), "other", {"acme.kind": "index"})])]).SerializeToString()
    [count] = scanner.scan(data, [(0, len(data))])
    assert (count.total, count.needs_look) == (1, False)


@pytest.mark.parametrize(("change", "message"), [
    (("title: Acme RAG", "titel: Acme RAG"), "conventions.0.titel"),
    (("contexts: acme.hits$.items[*]", "contexts: acme.hits$items"), "the JSON path must be made of"),
    (("marker: none", "marker: sometimes"), "marker"),
])
def test_a_bad_table_is_refused_naming_the_entry(change: tuple[str, str], message: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_table(NEW_TABLE.replace(*change), "test table")
    assert message in str(error.value) and str(error.value).startswith("test table:")


def test_the_built_in_table_has_the_conventions_of_the_docs() -> None:
    assert [c.name for c in table().conventions] == ["openinference", "genai", "openllmetry", "mastra", "tool", "vercel-ai"]
    with pytest.raises(ValidationError):
        ConventionConfig(order="openinference")  # a string is not a list
