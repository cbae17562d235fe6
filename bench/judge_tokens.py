"""Judge calls and prompt tokens per scored sample: ctxprec's batched verdict call vs
(a) a per-context baseline (one call per context, as Ragas does) and (b) the 1+1 form (a
verdicts call plus a reason call, as Mastra does). All three go through the same real client
(make_chat_client) to the stub judge over HTTP, with the same prompt wording, so the difference
is the call structure alone. Tokens are the stub's usage (characters / 4).

Then a traffic mix with repeated documents (FAQ-like: popular queries come back with the same
answer and overlapping retrievals) is scored with and without the verdict cache, reporting the
cache hit rate and the further token cut.

Goals: 1 call per sample and <= half the per-context baseline's prompt tokens.

    .venv/bin/python -m bench.judge_tokens [--quick]
"""
from __future__ import annotations

from bench.common import write_result

import argparse
import asyncio
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

from ctxprec.collector.stub_judge import StubJudge, StubSettings
from ctxprec.scorer import JudgeConfig, build_engine
from ctxprec.scorer.judge.local_eval import load_cases

ROOT = Path(__file__).resolve().parents[1]
K = 10
MODEL = "openai/ctxprec-stub-judge"


def chunk(sentences: list[str], target_chars: int, rng: random.Random) -> str:
    """A retrieval chunk of about target_chars built from real sentences of the labelled set."""
    parts: list[str] = []
    while sum(len(p) + 1 for p in parts) < target_chars:
        parts.append(rng.choice(sentences))
    return " ".join(parts)


def make_samples(count: int, chunk_chars: int, seed: int = 7) -> list[dict[str, Any]]:
    cases = load_cases()
    rng = random.Random(seed)
    samples = []
    for i in range(count):
        case = cases[i % len(cases)]
        own = case["contexts"]
        others = [c for j, other in enumerate(cases) if j != i % len(cases) for c in other["contexts"]]
        contexts = [chunk(own if rng.random() < 0.4 else others, chunk_chars, rng) for _ in range(K)]
        samples.append({"query": case["question"], "output": case["answer"], "contexts": contexts})
    return samples


def make_repeated_traffic(count: int, chunk_chars: int, seed: int = 11) -> list[dict[str, Any]]:
    """Popular queries recur (Zipf-like) with the same answer; each retrieval takes 10 of the
    query's 14 candidate documents, so most documents recur across samples of that query."""
    cases = load_cases()[:20]
    rng = random.Random(seed)
    sentences = [s for c in cases for s in c["contexts"]]
    pools = [
        [chunk(case["contexts"] + rng.sample(sentences, 4), chunk_chars, random.Random(q * 100 + d)) for d in range(14)]
        for q, case in enumerate(cases)
    ]
    weights = [1 / (r + 1) for r in range(len(cases))]
    samples = []
    for _ in range(count):
        q = rng.choices(range(len(cases)), weights)[0]
        docs = rng.sample(pools[q], K)
        samples.append({"query": cases[q]["question"], "output": cases[q]["answer"], "contexts": docs})
    return samples


async def score_all(stub: StubJudge, samples: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    stub.reset_stats()
    engine = build_engine(JudgeConfig(model=MODEL, api_base=stub.url, api_key="bench", **options))
    calls = prompt = completion = cached = 0
    started = time.perf_counter()
    try:
        # Sequential, so that cache behaviour is that of traffic arriving one sample at a time.
        for s in samples:
            result = await engine.score(s["query"], s["contexts"], output=s["output"])
            calls += result.usage.calls
            prompt += result.usage.prompt_tokens
            completion += result.usage.completion_tokens
            cached += result.usage.cached_contexts
    finally:
        await engine.aclose()
    n = len(samples)
    assert stub.stats.requests == calls and stub.stats.prompt_tokens == prompt, "usage must match the stub's counters"
    return {
        "calls_per_sample": round(calls / n, 3),
        "prompt_tokens_per_sample": round(prompt / n, 1),
        "completion_tokens_per_sample": round(completion / n, 1),
        "cached_context_share": round(cached / (n * K), 3),
        "wall_s": round(time.perf_counter() - started, 2),
    }


async def run(quick: bool) -> dict[str, Any]:
    n = 10 if quick else 60
    out: dict[str, Any] = {
        "description": (
            f"{n} samples x {K} contexts, scored through the real client against the stub judge over HTTP; "
            "prompt tokens = stub usage (chars/4). per_context = one call per context (Ragas-style); "
            "one_plus_one = verdicts call + reason call (Mastra-style); ctxprec = one batched verdict call and a "
            "template reason."
        ),
        "goal": "ctxprec: 1 call/sample and <= 0.5x the per-context baseline's prompt tokens",
    }
    async with StubJudge(StubSettings()) as stub:
        for label, chars in (("chunks_500_chars", 500), ("chunks_1500_chars", 1500)):
            samples = make_samples(n, chars)
            ctxprec = await score_all(stub, samples, cache_size=0)
            per_context = await score_all(stub, samples, cache_size=0, max_contexts_per_call=1)
            one_plus_one = await score_all(stub, samples, cache_size=0, reason_mode="llm")
            out[label] = {
                "ctxprec": ctxprec,
                "per_context_baseline": per_context,
                "one_plus_one_baseline": one_plus_one,
                "prompt_token_ratio_vs_per_context": round(
                    ctxprec["prompt_tokens_per_sample"] / per_context["prompt_tokens_per_sample"], 3),
                "prompt_token_ratio_vs_one_plus_one": round(
                    ctxprec["prompt_tokens_per_sample"] / one_plus_one["prompt_tokens_per_sample"], 3),
            }
        traffic = make_repeated_traffic(40 if quick else 300, 500)
        without = await score_all(stub, traffic, cache_size=0)
        cached = await score_all(stub, traffic, cache_size=10_000)
        out["repeated_documents"] = {
            "samples": len(traffic),
            "description": "20 FAQ-like queries, Zipf popularity, same answer per query, 10 of 14 candidate docs per retrieval",
            "no_cache": without,
            "with_cache": cached,
            "cache_hit_rate": cached["cached_context_share"],
            "prompt_token_ratio_cache_vs_no_cache": round(
                cached["prompt_tokens_per_sample"] / without["prompt_tokens_per_sample"], 3),
        }
    out["machine"] = {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (about 10 s)")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.quick))
    for label in ("chunks_500_chars", "chunks_1500_chars"):
        r = result[label]
        sys.stdout.write(
            f"{label}: ctxprec {r['ctxprec']['calls_per_sample']} calls, {r['ctxprec']['prompt_tokens_per_sample']:.0f} "
            f"prompt tokens/sample | per-context {r['per_context_baseline']['calls_per_sample']} calls, "
            f"{r['per_context_baseline']['prompt_tokens_per_sample']:.0f} | 1+1 {r['one_plus_one_baseline']['calls_per_sample']} "
            f"calls, {r['one_plus_one_baseline']['prompt_tokens_per_sample']:.0f} | ratio vs per-context "
            f"{r['prompt_token_ratio_vs_per_context']}, vs 1+1 {r['prompt_token_ratio_vs_one_plus_one']}\n"
        )
    rep = result["repeated_documents"]
    sys.stdout.write(
        f"repeated documents ({rep['samples']} samples): cache hit rate {rep['cache_hit_rate']:.1%}, prompt tokens "
        f"{rep['no_cache']['prompt_tokens_per_sample']:.0f} -> {rep['with_cache']['prompt_tokens_per_sample']:.0f} per sample "
        f"(ratio {rep['prompt_token_ratio_cache_vs_no_cache']}), calls {rep['no_cache']['calls_per_sample']} -> "
        f"{rep['with_cache']['calls_per_sample']}\n"
    )
    write_result("judge_tokens", result, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
