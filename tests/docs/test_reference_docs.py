"""The repo's reference docs are generated from the code or checked against it, and nothing in
the repository sends a reader to a file outside it."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ctxprec.collector.assembly import conventions_docs
from ctxprec.collector.assembly.table import table
from ctxprec.collector.metrics import reference
from ctxprec.collector.metrics.registry import Metrics

ROOT = Path(__file__).resolve().parents[2]


def test_metrics_reference_is_generated_from_the_registry() -> None:
    assert reference.PATH.read_text(encoding="utf-8") == reference.render(), (
        "docs/METRICS.md is out of date: run python -m ctxprec.collector.metrics.reference")


def test_formats_conventions_section_is_generated_from_the_table() -> None:
    assert conventions_docs.PATH.read_text(encoding="utf-8") == conventions_docs.render(), (
        "docs/FORMATS.md is out of date: run python -m ctxprec.collector.assembly.conventions_docs")
    section = conventions_docs.render_section(table())
    for convention in table().conventions:
        assert f"`{convention.name}`" in section
        for source in convention.retrieval.sources if convention.retrieval else ():
            assert (source.contexts or source.ids).text in section


def test_every_exposed_metric_family_is_listed() -> None:
    text = reference.render()
    metrics = Metrics()
    exposed = {family.name for family in metrics.registry.collect()}
    assert exposed, "the registry exposes nothing"
    for name in exposed:
        # collect() names counters without _total; the page lists them as scraped.
        assert f"`{name}`" in text or f"`{name}_total`" in text, name


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = []
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file() and path.suffix in {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".json", ".sh", ".cfg", ""}:
            files.append(path)
    return files


# A design document kept beside the repository, or an absolute path of one machine (spelt in
# pieces so that this file does not match itself).
OUTSIDE = re.compile("|".join(["SPEC" + r"\.md", r"\.\./" + "shared/", "/" + "work/", "/" + "home/[a-z]"]))


def test_no_file_refers_to_a_file_outside_the_repository() -> None:
    offenders = []
    files = _tracked_text_files()
    assert len(files) > 100
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders)


def test_relative_links_in_docs_resolve() -> None:
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "\n".join(broken)
