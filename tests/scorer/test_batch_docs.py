"""The docs that list what the code defines cannot drift from it: the alias table in
docs/BATCH.md and the score record's fields in docs/FORMATS.md."""
from __future__ import annotations

import json
import re
from pathlib import Path

from ctxprec.scorer.events import EVENT_FIELDS, FIELD_ALIASES
from ctxprec.scorer.records import RECORD_FIELDS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def table_rows(text: str, first_header: str) -> list[list[str]]:
    """The body rows of the markdown table whose header row starts with `first_header`."""
    rows: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            if inside:
                break
            continue
        if not inside:
            inside = cells[0] == first_header
            continue
        if not set(cells[0]) <= set("-: "):
            rows.append(cells)
    return rows


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_batch_md_lists_every_alias_of_every_field() -> None:
    rows = table_rows((DOCS / "BATCH.md").read_text(encoding="utf-8"), "field")
    documented = {name: names(cells[1]) for cells in rows for name in names(cells[0])}
    assert set(documented) == set(EVENT_FIELDS)
    for field in EVENT_FIELDS:
        assert documented[field] == list(FIELD_ALIASES.get(field, ())), f"docs/BATCH.md, row of '{field}'"


def test_formats_md_shows_the_score_record_fields_in_order() -> None:
    text = (DOCS / "FORMATS.md").read_text(encoding="utf-8")
    section = text[text.index("## Score record"):text.index("## Kafka message formats")]
    example = json.loads(section[section.index("```json") + len("```json"):section.index("```", section.index("```json") + 7)])
    assert tuple(example) == RECORD_FIELDS
    described = {name for cells in table_rows(section, "field") for name in names(cells[0])}
    missing = set(RECORD_FIELDS) - described - {"trace_id", "span_id", "service", "retriever", "scale"}
    assert not missing, f"docs/FORMATS.md describes no {sorted(missing)}"
    assert "timestamp" in described
