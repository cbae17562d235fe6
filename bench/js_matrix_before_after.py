"""The JavaScript apps' matrix before and after issue 20: per app x shape, what a whole `ctxprec
serve` process made of the same app's traffic on the code before the issue (an old checkout given
as an argument, with its own venv) and on this tree.

    nice -n 10 .venv/bin/python -m bench.js_matrix_before_after OLD_CHECKOUT [--only PREFIX] [--out FILE]

OLD_CHECKOUT is a checkout of the code before issue 20 (commit 40ea3d3378) with its test venv
built, e.g. `git worktree add --detach ../before 40ea3d3378 && make -C ../before
.venv/.installed-test`. The checkout is never written to. Because of it this benchmark is not in
bench/run_all.py's default list; run it by hand (it also needs the JS apps' node_modules and the
framework apps' .venv-apps, which `make test` installs).

Each cell of tests/realtraffic/js_matrix.py (CELLS and NO_CONTENT_CELLS), and the LlamaIndex +
OpenLLMetry app whose index is built while instrumented, runs once against each version, one
cell at a time, before then after:

- `ctxprec stub-judge` from that version's venv (its own process), reached through a small
  recording proxy in this process, so every judge request's data block (query, contexts in the
  order sent, reference and reference_kind) is seen as the judge saw it;
- `ctxprec serve` from that version's venv (its own process): OTLP/HTTP on a free port, gRPC off,
  `--metrics` on a free port with `--metrics-open`, `--sample-rate 1`, `--quiet-period 0.2`,
  `--judge-cache-size 0` (every retrieval reaches the judge), `--judge-max-contexts-per-call 100`
  (one request per retrieval), span write-back forwarding to a real
  OTLP receiver in this process (tests/helpers/otlp_capture.py);
- the app (tests/helpers/js_apps.py, tests/helpers/framework_apps.py) exporting to that serve.
  Its report says what it retrieved (query, contexts in rank order) and what the mock model
  answered.

A run is over when the serve process has forwarded every span it received, holds no trace and no
queued retrieval, and its counts have not moved for 1.5 s (at most 60 s; a wait that ends on the
deadline is noted).

Config: cells whose retrieval has the app's own shape (Mastra plain tool, Mastra workflow) run
with the cell's `conventions.mappings` entry, the YAML the tests use. The old code knows only the
single `conventions.mapping` (query, contexts, output: no `when`, no `ids`, no `name`): it is first
started with the same YAML (its refusal is recorded), then with that entry as a single `mapping`
without the keys it cannot express (recorded in `config`).

Figures per cell and version, in `cells` (the markdown `table` shows retrievals, decisions, with
documents, clean answers and reference_kind; `totals` sums the first four over all cells, and
`cells_all_clean` counts the cells where decisions, clean answers and retrievals are equal):

- `retrievals`: retrievals the app made (its report: one per question, 3 per cell);
- `decisions`: `ctxprec_samples_total{service}` by decision, scraped from /metrics;
- `with_documents`: decisions whose retrieval had documents to score: every decision but
  `no_contexts` and `no_content` (with sample rate 1 and no budget these are `evaluated`, or
  `failed`/`duplicate` if any);
- `clean_answers`: the app's retrievals that reached the judge exactly as the app made them and
  answered: a judge request with the run's query, its contexts in the app's rank order,
  `reference_kind` `output` and as reference the text the mock model returned;
- `reference_kind`: `ctxprec_reference_kind_total{service}` by kind (what relevance was judged
  against: `output` the answer, `query` when no answer was found);
- `answer_source`: `ctxprec.answer_source` of the scored spans forwarded downstream (`llm_span`,
  `chain_output`, `none`...), `answer_raw` those marked `ctxprec.answer_raw`, and `scored_spans`
  the names of the spans that carried a score (which span was taken as the retrieval);
- `judge_requests`: the verdict requests the judge got (one per scored retrieval: contexts per call
  are not capped below 100), `judged_in_rank_order` the app's retrievals judged with their query
  and contexts in rank order, and `extra_judged` the requests beyond one per such retrieval (a
  retrieval judged twice, or something judged that the app did not retrieve).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from bench.common import machine, write_result
from tests.helpers.processes import free_port
from tests.helpers.framework_apps import AppRun, run_app
from tests.helpers.js_apps import JsCell, run_js_app
from tests.helpers.otlp_capture import OtlpCapture
from tests.realtraffic.js_matrix import CELLS, MAPPINGS, NO_CONTENT_CELLS

ROOT = Path(__file__).resolve().parent.parent
BEGIN_DATA, END_DATA = "BEGIN_DATA", "END_DATA"
SETTLE_S = 1.5
DEADLINE_S = 60.0
NO_DOCUMENTS = ("no_contexts", "no_content")


# -- the judge, seen through a recording proxy ---------------------------------------------------

class JudgeTap:
    """Forwards every request to a stub judge process and keeps the data block of each request."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.requests: list[dict[str, Any]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> "JudgeTap":
        self._session = aiohttp.ClientSession()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._relay)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _record(self, body: bytes) -> None:
        try:
            messages = json.loads(body)["messages"]
            text = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
            lines = text.splitlines()
            data = json.loads(lines[lines.index(BEGIN_DATA) + 1])
        except (ValueError, KeyError, TypeError, StopIteration, IndexError):
            return
        self.requests.append(data)

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        if request.method == "POST":
            self._record(body)
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("authorization", "content-type", "accept")}
        async with self._session.request(request.method, self.upstream + request.path_qs, data=body,
                                         headers=headers) as response:
            payload = await response.read()
            return web.Response(body=payload, status=response.status,
                                content_type=response.content_type or "application/json")


# -- processes ---------------------------------------------------------------------------------

def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CTXPREC_"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
            return response.status, await response.text()


async def _stop(proc: asyncio.subprocess.Process, timeout: float = 20.0) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


class Refused(Exception):
    """The serve process exited before it was ready (a config it does not take)."""


@dataclass
class Version:
    label: str  # "before" | "after"
    checkout: Path
    stub: asyncio.subprocess.Process | None = None
    tap: JudgeTap | None = None

    @property
    def ctxprec(self) -> str:
        return str(self.checkout / ".venv" / "bin" / "ctxprec")

    async def start(self) -> None:
        port = free_port()
        self.stub = await asyncio.create_subprocess_exec(
            self.ctxprec, "stub-judge", "--port", str(port), env=_env(), cwd=self.checkout,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                if (await _get(f"http://127.0.0.1:{port}/healthz"))[0] == 200:
                    break
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            if time.monotonic() > deadline or self.stub.returncode is not None:
                raise RuntimeError(f"{self.label}: the stub judge did not come up")
            await asyncio.sleep(0.2)
        self.tap = await JudgeTap(f"http://127.0.0.1:{port}").start()

    async def stop(self) -> None:
        if self.tap is not None:
            await self.tap.stop()
        if self.stub is not None:
            await _stop(self.stub)


class Serve:
    """One `ctxprec serve` process of a version, forwarding to a capture in this process."""

    def __init__(self, version: Version, config: dict[str, Any] | None, tmp: Path) -> None:
        self.version, self.config, self.tmp = version, config, tmp
        self.otlp_port, self.metrics_port = free_port(), free_port()
        self.capture = OtlpCapture(record_bodies=False)
        self.proc: asyncio.subprocess.Process | None = None
        self.log = tmp / f"serve-{version.label}.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}/v1/traces"

    async def __aenter__(self) -> "Serve":
        assert self.version.tap is not None
        await self.capture.start()
        args = [self.version.ctxprec, "serve", "--otlp-http", f"127.0.0.1:{self.otlp_port}", "--otlp-grpc", "off",
                "--metrics", f"127.0.0.1:{self.metrics_port}", "--metrics-open", "--sample-rate", "1",
                "--quiet-period", "0.2", "--max-wait", "5", "--shutdown-timeout", "5",
                "--judge-model", "openai/stub", "--judge-api-base", self.version.tap.url,
                "--judge-api-key", "bench-key", "--judge-cache-size", "0", "--judge-max-contexts-per-call", "100",
                "--forward-to", self.capture.http_url, "--write-back", "span"]
        if self.config is not None:
            path = self.tmp / f"ctxprec-{self.version.label}.yaml"
            path.write_text(yaml.safe_dump(self.config, sort_keys=False), encoding="utf-8")
            args += ["--config", str(path)]
        log = self.log.open("wb")
        self.proc = await asyncio.create_subprocess_exec(*args, env=_env(), cwd=self.tmp, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 60
        while True:
            if self.proc.returncode is not None:
                await self.capture.stop()
                raise Refused(self._error_line())
            try:
                if (await _get(f"http://127.0.0.1:{self.metrics_port}/readyz"))[0] == 200:
                    return self
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                await self.__aexit__()
                raise RuntimeError(f"{self.version.label} serve not ready after 60 s: {self._error_line()}")
            await asyncio.sleep(0.2)

    def _error_line(self) -> str:
        lines = [ln.strip() for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        for line in reversed(lines):
            if "error" in line.lower() or "config" in line.lower():
                return line[:300]
        return lines[-1][:300] if lines else "(no output)"

    async def __aexit__(self, *exc: Any) -> None:
        if self.proc is not None:
            await _stop(self.proc)
        await self.capture.stop()

    async def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        _, text = await _get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return out

    async def settle(self, notes: list[str]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Until every received span went downstream, nothing is buffered or queued, every
        evaluated decision's scored span arrived, and the counts held still for SETTLE_S."""
        deadline = time.monotonic() + DEADLINE_S
        last: tuple[Any, ...] | None = None
        still_since = time.monotonic()
        while True:
            m = await self.metrics()
            received = sum(v for (n, _), v in m.items() if n == "ctxprec_spans_received_total")
            decisions = {dict(labels).get("decision", ""): v for (n, labels), v in m.items()
                         if n == "ctxprec_samples_total"}
            evaluated = decisions.get("evaluated", 0)
            buffered = m.get(("ctxprec_traces_buffered", ()), 0) + m.get(("ctxprec_queue_depth", ()), 0)
            scored = len(self.capture.find_spans("gen_ai.evaluation.name", "context_precision"))
            state = (received, len(self.capture.spans), tuple(sorted(decisions.items())), scored)
            done = received > 0 and len(self.capture.spans) >= received and buffered == 0 and scored >= evaluated
            now = time.monotonic()
            if state != last:
                last, still_since = state, now
            if done and now - still_since >= SETTLE_S:
                return m
            if now > deadline:
                notes.append(f"not settled after {DEADLINE_S:g} s: received {received:g} spans, forwarded "
                             f"{len(self.capture.spans)}, buffered+queued {buffered:g}, scored spans {scored} "
                             f"of {evaluated:g} evaluated")
                return m
            await asyncio.sleep(0.2)


# -- one cell against one version --------------------------------------------------------------

@dataclass
class Target:
    """A cell of the JS matrix, or the LlamaIndex + OpenLLMetry app."""

    name: str
    app: str
    js: JsCell | None = None
    expect: str = "3 evaluated, 3 clean"


def targets(only: str | None, llamaindex: bool) -> list[Target]:
    out = [Target(c.name, c.app, c) for c in CELLS]
    out += [Target(c.name, c.app, c, expect="3 no_content (documents carry only ids)") for c in NO_CONTENT_CELLS]
    if llamaindex:
        out.append(Target("llamaindex-openllmetry-direct (index built instrumented)", "llamaindex-openllmetry",
                          expect="one evaluated per query, none for the index build"))
    return [t for t in out if not only or t.name.startswith(only)]


def configs(target: Target, label: str) -> list[tuple[str, dict[str, Any] | None]]:
    """(what was run, YAML config) to try in turn: the first a serve process takes is measured."""
    entries = MAPPINGS.get(target.app)
    if not entries:
        return [("none", None)]
    tried: list[tuple[str, dict[str, Any] | None]] = [("conventions.mappings (as the tests)",
                                                      {"conventions": {"mappings": entries}})]
    if label == "before":
        entry = entries[0]
        single = {k: v for k, v in entry.items() if k in ("query", "contexts", "output")}
        dropped = ", ".join(f"`{k}`" for k in entry if k not in single)
        tried.append((f"conventions.mapping, single (dropped: {dropped})", {"conventions": {"mapping": single}}))
    return tried


def judged_matches(requests: list[dict[str, Any]], runs: list[AppRun]) -> tuple[int, int, int]:
    """(runs judged with their contexts in rank order, of those with the model's answer as the
    `output` reference, verdict requests beyond one per run so judged: a retrieval judged twice,
    or something judged that the app did not retrieve)."""
    verdicts = [r for r in requests if r.get("task") == "verdicts"]

    def contexts(req: dict[str, Any]) -> list[str]:
        return [c["text"] for c in sorted(req.get("contexts") or [], key=lambda c: c["context_index"])]

    in_order = clean = 0
    for run in runs:
        hits = [i for i, r in enumerate(verdicts) if r.get("query") == run.query and contexts(r) == run.contexts]
        if hits:
            in_order += 1
        if any(verdicts[i].get("reference_kind") == "output" and verdicts[i].get("reference") == run.answer
               for i in hits):
            clean += 1
    return in_order, clean, len(verdicts) - in_order


async def run_target(target: Target, version: Version, tmp: Path) -> dict[str, Any]:
    assert version.tap is not None
    service = f"bench-{target.name.split(' ')[0]}"
    record: dict[str, Any] = {"notes": []}
    started = time.monotonic()
    for label, config in configs(target, version.label):
        version.tap.requests.clear()
        try:
            serve = await Serve(version, config, tmp).__aenter__()
        except Refused as exc:
            record["notes"].append(f"{label}: refused at start ({exc})")
            continue
        record["config"] = label
        try:
            try:
                if target.js is not None:
                    runs = await run_js_app(target.js, endpoints=[serve.endpoint], service=service)
                else:
                    runs = await run_app("llamaindex", "openllmetry", "direct", endpoints=[serve.endpoint],
                                         service=service)
            except RuntimeError as exc:
                record["notes"].append(f"the app failed: {str(exc)[-300:]}")
                runs = []
            m = await serve.settle(record["notes"])
            scored = serve.capture.find_spans("gen_ai.evaluation.name", "context_precision")
        finally:
            await serve.__aexit__()
        break
    else:
        record.update(config="none taken", retrievals=None, decisions={}, decisions_total=0, with_documents=0,
                      clean_answers=0, seconds=round(time.monotonic() - started, 1))
        return record

    record.update(figures(m, service, scored, version.tap.requests, runs),
                  spans_received=int(sum(v for (n, _), v in m.items() if n == "ctxprec_spans_received_total")),
                  seconds=round(time.monotonic() - started, 1))
    return record


def figures(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], service: str, scored: list[Any],
            requests: list[dict[str, Any]], runs: list[AppRun]) -> dict[str, Any]:
    """One run's figures (the module docstring says each) from the serve's metrics, the scored
    spans it forwarded and the judge requests it made, beside what the app retrieved."""

    def by(name: str, key: str) -> dict[str, int]:
        return {dict(labels)[key]: int(v) for (n, labels), v in sorted(m.items())
                if n == name and dict(labels).get("service") == service and v}

    decisions = by("ctxprec_samples_total", "decision")
    in_order, clean, extra = judged_matches(requests, runs)
    return dict(
        retrievals=len(runs),
        decisions=decisions,
        decisions_total=sum(decisions.values()),
        with_documents=sum(v for k, v in decisions.items() if k not in NO_DOCUMENTS),
        clean_answers=clean,
        judged_in_rank_order=in_order,
        reference_kind=by("ctxprec_reference_kind_total", "reference_kind"),
        answer_source=dict(Counter(str(s.attributes.get("ctxprec.answer_source")) for s in scored)),
        answer_raw=sum(1 for s in scored if s.attributes.get("ctxprec.answer_raw")),
        scored_spans=dict(Counter(s.name for s in scored)),
        judge_requests=sum(1 for r in requests if r.get("task") == "verdicts"),
        extra_judged=extra,
    )


# -- the table ---------------------------------------------------------------------------------

def _decisions(rec: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(rec.get("decisions", {}).items())) or "none"


def _kinds(rec: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(rec.get("reference_kind", {}).items())) or "-"


def _config(before: dict[str, Any], after: dict[str, Any]) -> str:
    b, a = before.get("config", ""), after.get("config", "")
    return "" if b == a == "none" else f"{b} / {a}"


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| cell | retrievals | before: decisions | before: with documents | before: clean answers "
             "| before: judged against | after: decisions | after: with documents | after: clean answers "
             "| after: judged against | config (before / after) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        b, a = row["before"], row["after"]
        lines.append(f"| {row['cell']} | {a.get('retrievals')} | {_decisions(b)} | {b['with_documents']} | "
                     f"{b['clean_answers']} | {_kinds(b)} | {_decisions(a)} | {a['with_documents']} | "
                     f"{a['clean_answers']} | {_kinds(a)} | {_config(b, a)} |")
    return lines


def totals(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for label in ("before", "after"):
        recs = [r[label] for r in rows]
        out[label] = {"retrievals": sum(r.get("retrievals") or 0 for r in recs),
                      "decisions": sum(r["decisions_total"] for r in recs),
                      "with_documents": sum(r["with_documents"] for r in recs),
                      "clean_answers": sum(r["clean_answers"] for r in recs),
                      "cells_all_clean": sum(1 for r in recs if r.get("retrievals")
                                             and r["clean_answers"] == r["retrievals"]
                                             and r["decisions_total"] == r["retrievals"])}
    return out


async def main(old: Path, only: str | None, llamaindex: bool) -> dict[str, Any]:
    versions = [Version("before", old), Version("after", ROOT)]
    for v in versions:
        if not Path(v.ctxprec).exists():
            raise SystemExit(f"{v.ctxprec} missing: build the venv of {v.checkout} (make .venv/.installed-test)")
    began = time.monotonic()
    rows: list[dict[str, Any]] = []
    try:
        for v in versions:
            await v.start()
        with tempfile.TemporaryDirectory() as tmp:
            for target in targets(only, llamaindex):
                row: dict[str, Any] = {"cell": target.name, "expected_after": target.expect}
                for v in versions:
                    row[v.label] = await run_target(target, v, Path(tmp))
                rows.append(row)
                print("\n".join(table([row])[2:]), flush=True)
    finally:
        for v in versions:
            await v.stop()
    commit = lambda path: os.popen(f"git -C {path} rev-parse --short HEAD").read().strip()  # noqa: E731
    return {
        "benchmark": "js_matrix_before_after",
        "description": (
            "Issue 20's closing figure: every cell of the JS apps' matrix (tests/realtraffic/js_matrix.py) and "
            "the LlamaIndex + OpenLLMetry app (index built while instrumented), each app's real traffic sent to "
            "a whole `ctxprec serve` process of the code before the issue and of this tree, one cell at a time, "
            "against `ctxprec stub-judge` at sample rate 1. decisions: ctxprec_samples_total by kind; with "
            "documents: decisions other than no_contexts/no_content; clean answers: retrievals whose query, "
            "contexts in the app's rank order and the mock model's answer (reference_kind output) reached the "
            "judge; judged against: ctxprec_reference_kind_total. The NO_CONTENT cells' documents carry only "
            "ids and scores: after, they should read no_content 3, 0 with documents. Module docstring: "
            "bench/js_matrix_before_after.py."),
        "before_commit": commit(old),
        "after_commit": commit(ROOT),
        "machine": machine(),
        "seconds": round(time.monotonic() - began, 1),
        "totals": totals(rows),
        "table": table(rows),
        "cells": rows,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("old_checkout", type=Path, help="checkout of the code before issue 20, its .venv built")
    parser.add_argument("--only", help="only the cells whose name starts with this (the result goes to quick/)")
    parser.add_argument("--no-llamaindex", action="store_true", help="leave out the LlamaIndex + OpenLLMetry app")
    parser.add_argument("--out", type=Path, help="write the result here instead of bench/results/")
    args = parser.parse_args()
    result = asyncio.run(main(args.old_checkout.resolve(), args.only, not args.no_llamaindex))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        path = args.out
    else:
        path = write_result("js_matrix_before_after", result, quick=bool(args.only))
    print(f"wrote {path} in {result['seconds']:.0f} s", file=sys.stderr)
