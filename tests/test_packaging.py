"""The distribution installs the folders scorer/ and collector/ as ctxprec.scorer and
ctxprec.collector, and nothing answers to the old top-level names."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_declared() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    declared = set(config["packages"])
    on_disk = {"ctxprec." + ".".join(init.parent.relative_to(ROOT).parts)
               for top in ("scorer", "collector") for init in (ROOT / top).rglob("__init__.py")}
    assert declared == on_disk
    assert config["package-dir"] == {"ctxprec.scorer": "scorer", "ctxprec.collector": "collector"}


def test_old_top_level_names_are_refused_even_with_the_repository_on_the_path() -> None:
    for old in ("scorer", "collector"):
        probe = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import {old}"
        result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd="/")
        assert result.returncode != 0
        assert f"import ctxprec.{old}, not {old}" in result.stderr


def test_new_names_import_from_anywhere() -> None:
    probe = "import ctxprec.scorer, ctxprec.collector.cli; print(ctxprec.scorer.create_context_precision_scorer.__name__)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "create_context_precision_scorer"
