"""The agent apps' matrix (issue 29) before and after: per app x instrumentor, what a whole
`ctxprec serve` process made of the app's traffic on the code of a git ref and on this tree, in
one run.

    nice -n 10 .venv/bin/python -m bench.agent_matrix_before_after [--ref main] [--only PREFIX] [--out FILE]

The ref's code is checked out into a scratch worktree (bench.common.baseline_code) and run by this
tree's virtual environment with that code first on PYTHONPATH, as bench/before_after.py does. Each
case of tests/realtraffic/agents/cases.py (the apps the tests run: .venv-agents, .venv-crewai and
.venv-apps, which `make test` builds) runs once against each version, before then after, its app
exporting traces, logs and metrics through `OTEL_EXPORTER_OTLP_ENDPOINT`; everything else is as in
bench/js_matrix_before_after.py (whose processes, judge tap and settling it uses): the stub judge
behind a recording proxy, `--sample-rate 1`, `--judge-cache-size 0`, span write-back forwarding to
a real OTLP receiver, a run over when the serve process has forwarded every span and its counts
held still for 1.5 s.

Figures per case and version, in `cases`:

- `retrievals`: retrievals the app made (its report: the questions whose tool or retriever
  returned documents; the weather agent makes none);
- `decisions`: `ctxprec_samples_total{service}` by decision;
- `judged_in_rank_order` (right contexts): the app's retrievals that reached the judge with their
  query and their contexts in the order the model saw them (the tool's result; LLMRerank's list);
- `clean_answers` (right answers): the app's retrievals judged with those contexts against the fake
  model's answer (`reference_kind` `output`, the reference exactly the text the model returned);
- the other figures of bench/js_matrix_before_after.py (`with_documents`, `reference_kind`,
  `answer_source`, `scored_spans`, `extra_judged`...), and `log_records_forwarded`;
- `as_expected`: the case's expected outcome reached (tests/realtraffic/test_agents.py asserts
  it): every retrieval evaluated with right contexts and answer; or, content capture off, every
  retrieval decided `no_content`; or, the weather agent, no decision at all.

`totals` sums retrievals, decisions, right contexts and right answers and counts the cases as
expected, per version.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT, baseline_code, machine, write_result
from bench.js_matrix_before_after import Refused, Serve, Version, _decisions, figures
from tests.helpers.framework_apps import runs_of
from tests.realtraffic.agents.cases import CASES, Case, run_case


@dataclass
class CodeVersion(Version):
    """A version run by this tree's interpreter, with `pythonpath` (a baseline's code) or not."""

    pythonpath: Path | None = None
    wrapper: Path | None = None

    @property
    def ctxprec(self) -> str:
        assert self.wrapper is not None
        return str(self.wrapper)

    def write_wrapper(self, folder: Path) -> None:
        """A `ctxprec` command for this version: the serve and stub-judge processes run through it."""
        self.wrapper = folder / f"ctxprec-{self.label}"
        path = f"PYTHONPATH={self.pythonpath} " if self.pythonpath else ""
        self.wrapper.write_text(f'#!/bin/sh\n{path}exec {sys.executable} -m ctxprec.collector.cli "$@"\n')
        self.wrapper.chmod(self.wrapper.stat().st_mode | stat.S_IXUSR)


def expected(case: Case, retrievals: int) -> str:
    if case.expect == "none":
        return "no decision"
    if case.expect == "no_content":
        return f"{retrievals} no_content"
    return f"{retrievals} evaluated, right contexts and answers"


def as_expected(case: Case, record: dict[str, Any]) -> bool:
    decisions, n = record["decisions"], record["retrievals"]
    if case.expect == "none":
        return not decisions
    if case.expect == "no_content":
        return decisions == {"no_content": n}
    return decisions == {"evaluated": n} and record["judged_in_rank_order"] == record["clean_answers"] == n


async def run_case_on(case: Case, version: CodeVersion, tmp: Path) -> dict[str, Any]:
    assert version.tap is not None
    service = f"bench-{case.name}"
    record: dict[str, Any] = {"notes": []}
    started = time.monotonic()
    version.tap.requests.clear()
    try:
        serve = await Serve(version, None, tmp).__aenter__()
    except Refused as exc:
        raise SystemExit(f"{version.label}: serve refused to start: {exc}") from exc
    try:
        try:
            report = await run_case(case, endpoint=f"http://127.0.0.1:{serve.otlp_port}", service=service)
            runs = [run for run in runs_of(report) if run.contexts]
        except RuntimeError as exc:
            record["notes"].append(f"the app failed: {str(exc)[-300:]}")
            runs = []
        m = await serve.settle(record["notes"])
        scored = serve.capture.find_spans("gen_ai.evaluation.name", "context_precision")
        logs_forwarded = len(serve.capture.logs)
    finally:
        await serve.__aexit__()

    record.update(figures(m, service, scored, version.tap.requests, runs),
                  log_records_forwarded=logs_forwarded, seconds=round(time.monotonic() - started, 1))
    record["as_expected"] = as_expected(case, record)
    return record


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| case | app | retrievals | before: decisions | before: right contexts | before: right answers "
             "| after: decisions | after: right contexts | after: right answers | expected | before / after as "
             "expected |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    yes = {True: "yes", False: "no"}
    for row in rows:
        b, a = row["before"], row["after"]
        cells = [row["case"], row["app"], a["retrievals"]]
        for rec in (b, a):
            cells += [_decisions(rec), rec["judged_in_rank_order"], rec["clean_answers"]]
        cells += [row["expected"], f"{yes[b['as_expected']]} / {yes[a['as_expected']]}"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


def totals(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for label in ("before", "after"):
        recs = [r[label] for r in rows]
        out[label] = {key: sum(r[key] for r in recs)
                      for key in ("retrievals", "decisions_total", "judged_in_rank_order", "clean_answers")}
        out[label]["cases_as_expected"] = sum(1 for r in recs if r["as_expected"])
    out["cases"] = {"total": len(rows)}
    return out


async def measure(ref: str, commit: str, pythonpath: Path, only: str | None) -> dict[str, Any]:
    versions = [CodeVersion("before", ROOT, pythonpath=pythonpath), CodeVersion("after", ROOT)]
    cases = [c for c in CASES if not c.capture_only and (not only or c.name.startswith(only))]
    began = time.monotonic()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for v in versions:
                v.write_wrapper(Path(tmp))
                await v.start()
            for case in cases:
                row: dict[str, Any] = {"case": case.name, "app": f"{case.app} / {case.variant}"}
                for v in versions:
                    row[v.label] = await run_case_on(case, v, Path(tmp))
                row["expected"] = expected(case, row["after"]["retrievals"])
                rows.append(row)
                print("\n".join(table([row])[2:]), flush=True)
        finally:
            for v in versions:
                await v.stop()
    return {
        "benchmark": "agent_matrix_before_after",
        "description": (
            "Issue 29's matrix: every agent app x instrumentor of tests/realtraffic/agents/cases.py, each app's real "
            f"traffic sent to a whole `ctxprec serve` process of {ref} and of this tree, one case at a time, against "
            "`ctxprec stub-judge` at sample rate 1. decisions: ctxprec_samples_total by kind; right contexts: the "
            "app's retrievals that reached the judge with their query and contexts in the order the model saw them; "
            "right answers: of those, judged against the fake model's answer (reference_kind output); as expected: "
            "evaluated with right contexts and answers, no_content with content capture off, no decision for the "
            "weather tool. Module docstring: bench/agent_matrix_before_after.py."),
        "before_ref": ref,
        "before_commit": commit[:10],
        "after_commit": os.popen(f"git -C {ROOT} rev-parse --short HEAD").read().strip(),
        "machine": machine(),
        "seconds": round(time.monotonic() - began, 1),
        "totals": totals(rows),
        "table": table(rows),
        "cases": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ref", default="main", help="git ref whose code is 'before' (default main)")
    parser.add_argument("--only", help="only the cases whose name starts with this (the result goes to quick/)")
    parser.add_argument("--out", type=Path, help="write the result here instead of bench/results/")
    args = parser.parse_args(argv)
    with baseline_code(args.ref) as (commit, pythonpath):
        result = asyncio.run(measure(args.ref, commit, pythonpath, args.only))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        path = args.out
    else:
        path = write_result("agent_matrix_before_after", result, quick=bool(args.only))
    print(f"wrote {path} in {result['seconds']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
