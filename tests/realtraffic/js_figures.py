"""The JavaScript apps' matrix as figures: per app x shape, what ctxprec made of 3 retrievals.

    .venv/bin/python -m tests.realtraffic.js_figures [--only mastra] [--out figures.md]

Columns: decisions (the scoring sidecar's, by kind), retrievals with documents (outcomes whose
contexts are not empty), clean answers (contexts in the app's rank order, the mock model's answer
read from an LLM span, clean). Every cell should read 3 / 3 / 3 with `evaluated: 3`. A cell whose
`conventions.mappings` the engine does not know yet runs with the single `conventions.mapping`
(no `when`, no `ids`) and says so.
"""
from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from ctxprec.collector.config import ConfigError
from ctxprec.collector.stub_judge import StubJudge, StubSettings
from tests.helpers.js_apps import JsCell
from tests.realtraffic.js_matrix import CELLS, MAPPINGS, NO_CONTENT_CELLS, Observation, observe


def row(seen: Observation, note: str = "") -> str:
    by_query = {o.retrieval.query: o for o in seen.outcomes}
    with_docs = sum(1 for o in seen.outcomes if o.retrieval.contexts)
    clean = sum(1 for run in seen.runs if run.query in by_query and seen.matches(run, by_query[run.query]))
    decisions = ", ".join(f"{k}: {v}" for k, v in sorted(seen.decisions.items())) or "none"
    sources = ", ".join(sorted({o.retrieval.answer_source for o in seen.outcomes})) or "-"
    return f"| {seen.cell.name} | {decisions} | {with_docs} | {clean} | {sources} | {note} |"


async def figure(cell: JsCell, stub: StubJudge, tmp: Path) -> str:
    note = ""
    try:
        seen = await observe(cell, stub, tmp, timeout=8.0)
    except ConfigError as exc:
        entry = {k: v for k, v in MAPPINGS[cell.app][0].items() if k in ("query", "contexts", "output")}
        seen = await observe(cell, stub, tmp, timeout=8.0, config={"conventions": {"mapping": entry}})
        note = f"`mappings` refused ({str(exc).splitlines()[0][:80]}); single `mapping`"
    try:
        return row(seen, note)
    finally:
        await seen.capture.stop()


async def main(only: str | None, out: Path | None) -> None:
    cells = [c for c in (*CELLS, *NO_CONTENT_CELLS) if not only or c.app.startswith(only)]
    stub = StubJudge(StubSettings())
    await stub.start(host="127.0.0.1", port=0)
    lines = ["| cell | decisions | retrievals with documents | clean answers | answer source | note |",
             "|---|---|---|---|---|---|"]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for cell in cells:
                line = await figure(cell, stub, Path(tmp))
                print(line, flush=True)
                lines.append(line)
    finally:
        await stub.stop()
    if out:
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", help="cells whose app name starts with this")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    asyncio.run(main(args.only, args.out))
