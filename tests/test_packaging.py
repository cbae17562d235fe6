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


def test_the_image_is_built_with_the_tested_versions() -> None:
    from deploy.docker import constraints

    assert constraints.main(["--check"]) == 0, "run python -m deploy.docker.constraints"
    pins = dict(line.split("==") for line in constraints.PATH.read_text().splitlines() if "==" in line)
    for needed in ("litellm", "opentelemetry-sdk", "aiokafka", "prometheus-client", "pydantic-settings", "tenacity"):
        assert needed in pins
    dockerfile = (ROOT / "deploy" / "docker" / "Dockerfile").read_text()
    assert "-c constraints.txt" in dockerfile and "COPY deploy/docker/constraints.txt" in dockerfile
    assert "-c $(CONSTRAINTS)" in (ROOT / "Makefile").read_text()


def test_optional_integrations_are_extras_and_tests_declare_what_they_import() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    test_extra = " ".join(project["optional-dependencies"]["test"])
    for module, distribution in (("requests", "requests"), ("psutil", "psutil"), ("hypothesis", "hypothesis"),
                                 ("jsonschema", "jsonschema"), ("yaml", "PyYAML")):
        used = any(f"import {module}" in p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("*.py"))
        if used and distribution != "PyYAML":
            assert distribution in test_extra, f"tests import {module}; declare {distribution} in the test extra"
