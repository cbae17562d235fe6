"""Human labels into a serving sidecar: a RAG app's OpenTelemetry SDK sends real traces, the stub
judge scores them over HTTP, and people's labels come in by `POST /labels` (good, bad and
unmatched lines in one body; the token the diagnostics need) and by `--labels-file` (re-read when
it changes, nothing counted twice). The agreement served on /diagnostics/judge and as metrics is
the test's own count over the same labels and the stub's verdicts (its markers)."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from ctxprec.collector.stub_judge import StubJudge
from ctxprec.scorer.agreement import Confusion
from opentelemetry.sdk.trace.id_generator import IdGenerator

from tests.collector.rag_app import RagApp, running, scrape, serve_config, value, wait_until

pytestmark = pytest.mark.slow

TOKEN = "labels-test-token"
QUERY = "How do I reset my password?"
ANSWER = "Open settings and choose reset password."


class KnownIds(IdGenerator):
    """Ids drawn from a seeded generator, known before the spans are made: the k-th RAG request's
    retrieval span is the second span of its trace (root, retrieval, llm)."""

    def __init__(self, seed: int, requests: int) -> None:
        rng = random.Random(seed)
        self.traces = [rng.getrandbits(128) | 1 for _ in range(requests)]
        self.spans = [rng.getrandbits(64) | 1 for _ in range(3 * requests)]
        self._t = iter(self.traces)
        self._s = iter(self.spans)

    def generate_trace_id(self) -> int:
        return next(self._t)

    def generate_span_id(self) -> int:
        return next(self._s)

    def retrieval(self, k: int) -> tuple[str, str]:
        return f"{self.traces[k]:032x}", f"{self.spans[3 * k + 1]:016x}"


def _docs(verdicts: list[bool]) -> list[str]:
    return [("[relevant] " if v else "[irrelevant] ") + f"passage {i}" for i, v in enumerate(verdicts)]


def _line(ids: tuple[str, str], **fields: Any) -> str:
    return json.dumps({"trace_id": ids[0], "span_id": ids[1], **fields})


async def _post(url: str, body: str, token: str | None = TOKEN) -> tuple[int, Any]:
    headers = {"Content-Type": "application/x-ndjson"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession() as session, session.post(url, data=body.encode(), headers=headers) as r:
        text = await r.text()
        return r.status, (json.loads(text) if r.content_type == "application/json" else text)


async def _get(url: str) -> Any:
    async with aiohttp.ClientSession() as s, s.get(url, headers={"Authorization": f"Bearer {TOKEN}"}) as r:
        assert r.status == 200, await r.text()
        return json.loads(await r.text()) if r.content_type == "application/json" else await r.text()


def _human(body: dict[str, Any], judge: str) -> dict[str, Any] | None:
    return next((e for e in body["agreement"] if e["judge"] == judge and e["against"] == "human"), None)


async def test_labels_posted_and_from_a_file_give_the_agreement_of_the_same_labels(
        stub_judge: StubJudge, tmp_path: Path) -> None:
    rng = random.Random(11)
    requests = 12
    ids = KnownIds(33, requests)
    verdicts = [[rng.random() < 0.5 for _ in range(rng.randint(2, 4))] for _ in range(requests)]
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    labels_file = tmp_path / "labels.jsonl"
    # The file labels retrieval 8 (scored later: it waits) and retrieval 9 by one context.
    file_lines = [_line(ids.retrieval(8), relevant=[not v for v in verdicts[8]], annotator="file"),
                  _line(ids.retrieval(9), context_index=0, relevant=verdicts[9][0], annotator="file")]
    labels_file.write_text("\n".join(file_lines) + "\n")
    config = serve_config("--judge-model", "openai/stub", "--judge-api-base", stub_judge.url,
                          "--judge-api-key", "test-key", "--metrics-token-file", str(token_file),
                          "--labels-file", str(labels_file), "--verdict-store-size", "10")
    async with running(config) as pipeline:
        base = pipeline.metrics_url
        live = pipeline.identity.identifier
        expected = Confusion()
        app = RagApp(protocol="http", port=pipeline.otlp_http_port, id_generator=ids)
        try:
            for k in range(8):
                app.openinference(QUERY, _docs(verdicts[k]), ANSWER)
            await app.flush()
            await wait_until(lambda: pipeline.fanout.counts.get("evaluated", 0) == 8, timeout=60,
                             what="8 retrievals scored")

            # Without the token: refused, nothing taken.
            status, _ = await _post(f"{base}/labels", _line(ids.retrieval(0), relevant=verdicts[0]), token=None)
            assert status == 401
            human0 = [True] * len(verdicts[0])
            human3 = not verdicts[3][1]
            body = "\n".join([
                _line(ids.retrieval(0), relevant=human0, annotator="ana"),            # 1 matched
                "{not json",                                                           # 2 refused
                _line(ids.retrieval(3), context_index=1, relevant=human3),             # 3 matched
                _line(ids.retrieval(1), relevant=[True] * (len(verdicts[1]) + 1)),     # 4 wrong length
                _line(ids.retrieval(10), relevant=[True] * len(verdicts[10])),         # 5 waiting
                "",                                                                    # 6 blank
                _line(("xyz", ids.retrieval(2)[1]), relevant=[True]),                  # 7 bad trace id
                _line(ids.retrieval(2), context_index=9, relevant=True),               # 8 past the end
            ])
            status, answer = await _post(f"{base}/labels", body)
            assert status == 200, answer
            assert answer["matched"] == 2 and answer["waiting"] == 1
            assert [r["line"] for r in answer["refused"]] == [2, 4, 7, 8]
            reasons = {r["line"]: r["reason"] for r in answer["refused"]}
            assert "not valid JSON" in reasons[2] and "the retrieval had" in reasons[4]
            assert "trace_id must be 32 hex" in reasons[7] and "past the retrieval" in reasons[8]
            for said, truth in zip(verdicts[0], human0):
                expected.add(said, truth)
            expected.add(verdicts[3][1], human3)

            status, answer = await _post(f"{base}/labels", "{}", token=None)
            assert status == 401
            async with aiohttp.ClientSession() as s, s.post(f"{base}/labels", data=b"<xml/>", headers={
                    "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/xml"}) as r:
                assert r.status == 415 and "x-ndjson" in (await r.json())["error"]

            # The rest of the traffic: retrieval 8 (the file's waiting label) and 10 (the POSTed one).
            for k in range(8, requests):
                app.openinference(QUERY, _docs(verdicts[k]), ANSWER)
            await app.flush()
            await wait_until(lambda: pipeline.fanout.counts.get("evaluated", 0) == requests, timeout=60,
                             what="every retrieval scored")
        finally:
            await app.close()
        for said in verdicts[8]:
            expected.add(said, not said)
        for said in verdicts[10]:
            expected.add(said, True)

        # Retrieval 9's file label came before its verdicts too; it matched when they came.
        expected.add(verdicts[9][0], verdicts[9][0])
        judge_view = await _get(f"{base}/diagnostics/judge")
        entry = _human(judge_view, live)
        assert entry is not None and entry["contexts"] == expected.total
        assert entry["confusion"] == expected.as_dict()["confusion"]
        assert entry["kappa"] == expected.as_dict()["kappa"] and entry["agreement"] == expected.as_dict()["agreement"]
        assert entry["kappa_interval_95"] == expected.as_dict()["kappa_interval_95"]
        assert set(entry["annotators"]) == {"ana", "file"}
        assert judge_view["judges"][0] == {"judge": live, "model": "openai/stub",
                                           "prompt_version": pipeline.identity.prompt_version, "role": "live"}
        m = scrape(await _get(f"{base}/metrics"))
        assert value(m, "ctxprec_judge_labels_total", judge=live, against="human") == expected.total
        assert value(m, "ctxprec_judge_agreement_ratio", judge=live, against="human") == pytest.approx(
            expected.agreement)
        assert value(m, "ctxprec_judge_kappa", judge=live, against="human") == pytest.approx(expected.kappa)
        assert value(m, "ctxprec_judge_kappa_alert_threshold") == 0.4

        # Rewritten with one line changed and one added: the changed label replaces its old pairs,
        # the unchanged one is not counted again.
        before = pipeline.labels_file.reads
        changed = [file_lines[0], _line(ids.retrieval(9), context_index=0, relevant=not verdicts[9][0],
                                        annotator="file"),
                   _line(ids.retrieval(11), relevant=verdicts[11], annotator="file"),
                   _line(ids.retrieval(10), relevant=[True] * (len(verdicts[10]) + 1), annotator="file")]
        labels_file.write_text("\n".join(changed) + "\n")
        await wait_until(lambda: pipeline.labels_file.reads > before, timeout=30, what="the labels file re-read")
        fixed = Confusion()
        fixed.merge(expected)
        fixed.both_relevant -= verdicts[9][0]
        fixed.both_irrelevant -= not verdicts[9][0]
        fixed.add(verdicts[9][0], not verdicts[9][0])
        for said in verdicts[11]:
            fixed.add(said, said)
        entry = _human(await _get(f"{base}/diagnostics/judge"), live)
        assert entry is not None and entry["confusion"] == fixed.as_dict()["confusion"]

        # A line appended: read alone (the wrong-length line above is not counted again).
        before = pipeline.labels_file.reads
        with labels_file.open("a") as handle:
            handle.write(_line(ids.retrieval(2), context_index=0, relevant=verdicts[2][0], annotator="file") + "\n")
        await wait_until(lambda: pipeline.labels_file.reads > before, timeout=30, what="the appended line read")
        fixed.add(verdicts[2][0], verdicts[2][0])
        entry = _human(await _get(f"{base}/diagnostics/judge"), live)
        assert entry is not None and entry["confusion"] == fixed.as_dict()["confusion"]

        # A label for a retrieval whose verdicts left the store (10 kept; 12 scored): counted as evicted.
        status, answer = await _post(f"{base}/labels", _line(ids.retrieval(1), relevant=verdicts[1]))
        assert status == 200 and answer["matched"] == 0 and answer["waiting"] == 0
        assert "verdict store" in answer["refused"][0]["reason"]
        m = scrape(await _get(f"{base}/metrics"))
        assert value(m, "ctxprec_judge_labels_unmatched_total", reason="evicted") == 1
        assert value(m, "ctxprec_judge_labels_unmatched_total", reason="mismatch") == 3
