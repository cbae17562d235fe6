"""docs/INSTRUMENT.md shows the code the real-traffic apps run: each snippet equals the region of
the app it names, and every marked region is shown."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs import instrument_doc

ROOT = Path(__file__).resolve().parents[2]


def test_snippets_are_the_code_the_apps_run() -> None:
    text = instrument_doc.PATH.read_text(encoding="utf-8")
    assert text == instrument_doc.render(text), (
        "docs/INSTRUMENT.md is out of date: run python -m tests.docs.instrument_doc")


def test_every_marked_region_is_in_the_doc() -> None:
    text = instrument_doc.PATH.read_text(encoding="utf-8")
    regions = set(instrument_doc.all_regions())
    assert len(regions) >= 20
    assert regions - instrument_doc.named(text) == set(), "marked in an app, shown nowhere"
    assert instrument_doc.named(text) - regions == set(), "named in the doc, marked in no app"


def test_the_readme_links_the_guide() -> None:
    assert "(docs/INSTRUMENT.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_a_stale_snippet_is_rewritten_from_its_app() -> None:
    text = instrument_doc.PATH.read_text(encoding="utf-8")
    (path, name), *_ = sorted(instrument_doc.named(text))
    code = instrument_doc.all_regions()[(path, name)]
    stale = text.replace(code, "old_setup()\n" + code, 1)
    assert stale != text
    assert instrument_doc.render(stale) == text


def test_a_region_left_open_is_refused(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text("x = 1\n# doc: setup\ny = 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="never closed"):
        instrument_doc.regions(app)
