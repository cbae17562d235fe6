"""Runs the JavaScript RAG apps of tests/realtraffic/js (Mastra, Vercel AI SDK, LangChain.js) with
Node.js, each run in its own process, exporting with the real OTLP/HTTP exporters to the endpoints
given. `make test` installs their packages (`npm ci`, from the committed lockfiles).

The apps share the Python apps' corpus (tests/realtraffic/apps/corpus.py), handed to them as a
JSON file with the fake embedding of every known text, so both sides retrieve the same documents.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tests.helpers.framework_apps import AppRun, run_report, runs_of
from tests.realtraffic.apps import corpus

ROOT = Path(__file__).resolve().parents[2]
JS_DIR = ROOT / "tests" / "realtraffic" / "js"
RUNNER = JS_DIR / "runner.mjs"
# One folder per installed Mastra version (mastra-1.70/ has its own lockfile: see its package.json).
MODULE_DIRS = (JS_DIR / "node_modules", JS_DIR / "mastra-1.70" / "node_modules")


@dataclass(frozen=True)
class JsCell:
    """One cell of the matrix: an app, how it is called, how it exports."""

    app: str
    shape: str = "direct"  # "direct" | "http"
    protocol: str = "protobuf"  # "protobuf" | "json"
    mastra: str = "1.71"  # Mastra apps: "1.71" | "1.70"
    retrieval: str = "openinference"  # AI SDK apps' own retrieval span: "openinference" | "genai" | "genai-ids"

    @property
    def slug(self) -> str:
        """The app, its variant and the shape: what the app emits (the protocol aside)."""
        variant = f"-mastra{self.mastra}" if self.app.startswith("mastra") else ""
        if self.app.startswith("aisdk"):
            variant = f"-{self.retrieval}"
        return f"{self.app}{variant}-{self.shape}"

    @property
    def name(self) -> str:
        return f"{self.slug}-{self.protocol}"


def corpus_document() -> dict[str, Any]:
    texts = [d.text for d in corpus.DOCS] + [q.text for q in corpus.QUESTIONS]
    return {
        "docs": [{"id": d.doc_id, "text": d.text} for d in corpus.DOCS],
        "questions": [{"text": q.text, "answer": q.answer} for q in corpus.QUESTIONS],
        "top_k": corpus.TOP_K,
        "dimension": corpus.EMBED_DIM,
        "embeddings": {t: corpus.embed_text(t) for t in texts},
    }


def require_js_environment() -> str:
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not on PATH: the JavaScript apps need Node.js 20 or later")
    missing = [str(d) for d in MODULE_DIRS if not d.is_dir()]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: run `make test` (it installs the JavaScript apps)")
    return node


async def run_js_app(cell: JsCell, *, endpoints: Sequence[str], service: str,
                     timeout_s: float = 120.0) -> list[AppRun]:
    """Runs every question of the corpus through one app; returns what it retrieved and answered."""
    node = require_js_environment()
    with tempfile.TemporaryDirectory() as tmp:
        corpus_file, out = Path(tmp) / "corpus.json", Path(tmp) / "result.json"
        corpus_file.write_text(json.dumps(corpus_document()), encoding="utf-8")
        args = [node, str(RUNNER), "--app", cell.app, "--shape", cell.shape, "--protocol", cell.protocol,
                "--mastra", cell.mastra, "--retrieval", cell.retrieval, "--service-name", service,
                "--corpus", str(corpus_file), "--out", str(out)]
        for endpoint in endpoints:
            args += ["--endpoint", endpoint]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CTXPREC_", "NODE_"))}
        env["MASTRA_TELEMETRY_DISABLED"] = "1"
        report = await run_report(args, env=env, out=out, what=f"{cell.name} app", timeout_s=timeout_s)
    return runs_of(report)
