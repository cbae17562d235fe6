"""Adaptive sampling wired into `ctxprec serve`: real OpenTelemetry SDK apps send OTLP to the
sidecar in-process, the stub judge scores over HTTP, and scored spans go to a real OTLP receiver.

A degraded stream for one service raises that service's `ctxprec_sample_rate` while the other's
stays put; traces that only the raised rate keeps are then scored, and their span attributes,
score records and weights carry the raised rate. Switched off (the default), nothing moves."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from ctxprec.collector.config import ConfigError
from ctxprec.collector.model import Decision, Outcome
from ctxprec.collector.sampling.adaptive import AdaptiveSampler, AdaptiveSettings
from ctxprec.collector.sampling.config import SamplingConfig
from ctxprec.collector.serve import describe
from ctxprec.collector.stub_judge import StubJudge
from opentelemetry.sdk.trace.id_generator import IdGenerator

from tests.collector.rag_app import RagApp, running, scrape, serve_config, value, wait_until
from tests.helpers.otlp_capture import OtlpCapture

BASE_RATE = 0.05
WARMUP = 16  # the drift detector's warm-up, in scores per service
QUERY = "How do I reset my password?"
ANSWER = "Open settings and choose reset password."
# The stub judge reads the markers: MAP 1.0 and 0.5.
DOCS_HIGH = ["[relevant] Reset it under Settings > Security.", "[irrelevant] Our pricing plans."]
DOCS_LOW = ["[irrelevant] Office opening hours.", "[relevant] Use the reset link."]


class ChosenIds(IdGenerator):
    """Trace ids whose low 64 bits (what the sampler hashes) fall where the test wants: below the
    base rate (`kept`: scored at any rate), or in the band only a raised rate keeps."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self.band = False

    def generate_span_id(self) -> int:
        return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        space = 1 << 64
        low = (self._rng.randrange(int(0.5 * space), space) if self.band
               else self._rng.randrange(1, int(BASE_RATE * space)))
        return (self._rng.getrandbits(64) << 64) | low


class Outcomes:
    """A result sink keeping the evaluated outcomes (their score records carry the rate)."""

    def __init__(self) -> None:
        self.evaluated: list[Outcome] = []

    def emit(self, outcome: Outcome) -> None:
        if outcome.decision is Decision.EVALUATED:
            self.evaluated.append(outcome)

    def count(self, service: str) -> int:
        return sum(o.retrieval.service == service for o in self.evaluated)


def _config(tmp_path: Path, stub: StubJudge, capture: OtlpCapture, *flags: str):
    # The drift detector's warm-up is a YAML key: through a real config file.
    path = tmp_path / "ctxprec.yaml"
    path.write_text(f"drift:\n  warmup: {WARMUP}\n", encoding="utf-8")
    return serve_config("--config", str(path), "--sample-rate", str(BASE_RATE), "--judge-model", "openai/stub",
                        "--judge-api-base", stub.url, "--judge-api-key", "test-key",
                        "--forward-to", capture.http_url, "--write-back", "span", *flags)


async def _metrics(pipeline) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(f"{pipeline.metrics_url}/metrics") as response:
        assert response.status == 200
        return scrape(await response.text())


@pytest.mark.parametrize("adaptive", [True, False], ids=["on", "off"])
async def test_a_degraded_stream_raises_its_services_rate_and_the_scores_carry_it(
        tmp_path: Path, stub_judge: StubJudge, adaptive: bool) -> None:
    capture = await OtlpCapture().start()
    flags = ("--adaptive-sampling", "on") if adaptive else ()
    outcomes = Outcomes()
    try:
        async with running(_config(tmp_path, stub_judge, capture, *flags)) as pipeline:
            pipeline.add_sink(outcomes)
            ids = {"shop": ChosenIds(1), "search": ChosenIds(2)}
            apps = {s: RagApp(protocol="http", port=pipeline.otlp_http_port, service=s, id_generator=ids[s])
                    for s in ids}
            try:
                # Warm-up: 16 scores per service, three of four at 1.0 and one at 0.5.
                for i in range(WARMUP):
                    for app in apps.values():
                        app.openinference(QUERY, DOCS_LOW if i % 4 == 3 else DOCS_HIGH, ANSWER)
                for app in apps.values():
                    await app.flush()
                await wait_until(lambda: outcomes.count("shop") == outcomes.count("search") == WARMUP,
                                 what="the warm-up scored")
                m = await _metrics(pipeline)
                assert value(m, "ctxprec_sample_rate", service="shop") == BASE_RATE
                assert value(m, "ctxprec_sample_rate", service="search") == BASE_RATE

                # shop degrades: one detector block of 0.5 scores takes its drift statistic past
                # the warning level (about half-way to the alarm); search stays healthy.
                for _ in range(8):
                    apps["shop"].openinference(QUERY, DOCS_LOW, ANSWER)
                    apps["search"].openinference(QUERY, DOCS_HIGH, ANSWER)
                for app in apps.values():
                    await app.flush()
                await wait_until(lambda: outcomes.count("shop") == outcomes.count("search") == WARMUP + 8,
                                 what="the degraded block scored")
                detector = pipeline.drift.detectors["shop"]
                assert 0.2 <= detector.statistic < 1.0 and not detector.alarmed
                m = await _metrics(pipeline)
                raised = 1.0 if adaptive else BASE_RATE  # 0.05 x 20, capped at 1
                assert value(m, "ctxprec_sample_rate", service="shop") == raised
                assert value(m, "ctxprec_sample_rate", service="search") == BASE_RATE

                # Traces above the base rate's threshold: only a raised rate keeps them.
                band: dict[str, list[str]] = {"shop": [], "search": []}
                for service, app in apps.items():
                    ids[service].band = True
                    for _ in range(4):
                        band[service].append(app.openinference(QUERY, DOCS_HIGH, ANSWER).retriever_span_id)
                    await app.flush()
                if adaptive:
                    await wait_until(lambda: all(capture.span(s) is not None for s in band["shop"]),
                                     what="the band traces scored and forwarded")
                dropped = ("search",) if adaptive else ("search", "shop")
                await wait_until(lambda: all(_samples(pipeline).get((s, "not_sampled"), 0) >= 4 for s in dropped),
                                 what="the band traces that no rate keeps decided")
            finally:
                for app in apps.values():
                    await app.close()

            m = await _metrics(pipeline)
            scored_band = [o for o in outcomes.evaluated if o.retrieval.span_id in band["shop"]]
            if adaptive:
                assert len(scored_band) == 4
                for outcome in scored_band:
                    assert outcome.retrieval.sample_rate == 1.0
                    assert outcome.record is not None and outcome.record["sample_rate"] == 1.0
                    span = capture.span(outcome.retrieval.span_id)
                    assert span is not None and span.attributes["ctxprec.sample_rate"] == 1.0
                # Weights: 24 scores at 5% count 20 each, the 4 at the raised rate once each.
                assert value(m, "ctxprec_context_precision_weight_total", service="shop",
                             retriever="kb-v2") == pytest.approx(24 * 20 + 4)
            else:
                assert scored_band == []
                assert value(m, "ctxprec_samples_total", service="shop", decision="not_sampled") >= 4
            # Scores kept at the base rate say so, in the record and on the span.
            warm = next(o for o in outcomes.evaluated if o.retrieval.service == "search")
            assert warm.record is not None and warm.record["sample_rate"] == BASE_RATE
            span = await capture.wait_for_span("ctxprec.sample_rate", BASE_RATE)
            assert span is not None
            assert {o.retrieval.sample_rate for o in outcomes.evaluated if o.retrieval.service == "search"} == {BASE_RATE}
            assert value(m, "ctxprec_sample_rate", service="search") == BASE_RATE
    finally:
        await capture.stop()


def _samples(pipeline) -> dict[tuple[str, str], float]:
    """Decisions by (service, decision), read from the registry without a scrape."""
    out: dict[tuple[str, str], float] = {}
    for family in pipeline.metrics.registry.collect():
        if family.name == "ctxprec_samples":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out[(sample.labels["service"], sample.labels["decision"])] = sample.value
    return out


def test_adaptive_sampling_is_off_by_default_and_its_keys_default_to_the_samplers() -> None:
    assert serve_config().sampling.adaptive is False
    # The config's defaults are the sampler's own (declared in two places because adaptive.py
    # imports the config module).
    assert AdaptiveSettings.of(SamplingConfig()) == AdaptiveSettings(enabled=False)
    on = serve_config("--adaptive-sampling", "on", "--adaptive-factor", "5", "--adaptive-max-rate", "0.5")
    settings = AdaptiveSettings.of(on.sampling)
    assert settings.enabled and settings.factor == 5.0 and settings.max_rate == 0.5
    assert serve_config("--adaptive-sampling").sampling.adaptive is True  # a bare switch
    assert serve_config("--adaptive-sampling", "off").sampling.adaptive is False


@pytest.mark.parametrize(("flags", "message"), [
    (("--adaptive-sampling", "maybe"), "sampling.adaptive (from --adaptive-sampling): must be true or false"),
    (("--adaptive-factor", "0.5"), "sampling.adaptive_factor (from --adaptive-factor): must be >= 1"),
    (("--adaptive-max-rate", "0"), "sampling.adaptive_max_rate (from --adaptive-max-rate): must be > 0"),
])
def test_bad_adaptive_settings_are_refused_naming_the_key(flags: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        serve_config(*flags)


async def test_the_pipeline_publishes_every_services_rate_even_when_adaptive_sampling_is_off() -> None:
    async with running(serve_config("--sample-rate", "0.25")) as pipeline:
        assert isinstance(pipeline.sampler, AdaptiveSampler)
        assert pipeline.sampler.observe in pipeline.drift.observers
        assert pipeline.sampler.keep_trace(b"\x00" * 16, "checkout")
        assert pipeline.metrics.registry.get_sample_value("ctxprec_sample_rate", {"service": "checkout"}) == 0.25
        assert not any("adaptive" in line for line in describe(pipeline))


async def test_serve_says_when_sampling_is_adaptive() -> None:
    async with running(serve_config("--sample-rate", "0.05", "--adaptive-sampling", "on")) as pipeline:
        assert any("sample rate 0.05 (adaptive: raised while a drift is suspected)" in line
                   for line in describe(pipeline))
