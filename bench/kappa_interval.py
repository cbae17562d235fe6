"""How many labels give a useful kappa interval: the width of Cohen's kappa's 95% interval
(scorer/agreement.py, the interval ctxprec_judge_kappa_lower/upper and /diagnostics/judge report)
at 50, 200 and 1,000 labelled contexts, and how often that interval holds the judge's kappa.

The data are the local judge's labelled sets (scorer/judge/local_cases*.jsonl, every language and
split): the local judge's verdicts against the people's labels, per context, with the answer as
reference. That pool's own kappa stands for the judge's true kappa; samples of n labelled
contexts are drawn from it, and for each the interval is computed as the sidecar would.

Two ways of drawing, because labels come in retrievals: contexts drawn one by one (independent
labels: the interval's own assumption), and whole cases drawn until n contexts are labelled (the
contexts of one retrieval are labelled together, and are alike: the honest case). Coverage under
the second shows what the independence assumption costs.

    .venv/bin/python -m bench.kappa_interval            # 2,000 samples per size
    .venv/bin/python -m bench.kappa_interval --quick    # 300
"""
from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path
from typing import Any

from bench.common import machine, write_result
from ctxprec.scorer.agreement import Confusion
from ctxprec.scorer.judge.local import LocalJudge
from bench.local_judge import load_cases

SIZES = (50, 200, 1000)
SEED = 33


def _pairs_by_case() -> list[list[tuple[bool, bool]]]:
    judge = LocalJudge()
    cases = []
    for case in load_cases():
        outcome = judge.judge_sync(case["question"], case["contexts"], reference_kind="output",
                                   reference=case["answer"])
        cases.append([(v.relevant, label == "relevant") for v, label in zip(outcome.verdicts, case["labels"])])
    return cases


def _confusion(pairs: list[tuple[bool, bool]]) -> Confusion:
    c = Confusion()
    for said, truth in pairs:
        c.add(said, truth)
    return c


def _summary(widths: list[float], covered: int, samples: int) -> dict[str, Any]:
    widths.sort()
    return {"samples": samples, "width_mean": round(statistics.fmean(widths), 4),
            "width_median": round(statistics.median(widths), 4),
            "width_p5": round(widths[int(0.05 * len(widths))], 4),
            "width_p95": round(widths[int(0.95 * len(widths)) - 1], 4),
            "coverage": round(covered / samples, 4)}


def measure(samples: int) -> dict[str, Any]:
    by_case = _pairs_by_case()
    pool = [pair for case in by_case for pair in case]
    whole = _confusion(pool)
    truth = whole.kappa
    assert truth is not None
    rng = random.Random(SEED)
    sizes: dict[str, Any] = {}
    for n in SIZES:
        results = {}
        for mode in ("contexts", "cases"):
            widths, covered = [], 0
            for _ in range(samples):
                if mode == "contexts":
                    drawn = [rng.choice(pool) for _ in range(n)]
                else:
                    drawn = []
                    while len(drawn) < n:
                        drawn.extend(rng.choice(by_case))
                c = _confusion(drawn)
                low, high = c.kappa_interval() or (-1.0, 1.0)
                widths.append(high - low)
                covered += low <= truth <= high
            results[mode] = _summary(widths, covered, samples)
        sizes[str(n)] = results
    return {
        "name": "kappa_interval",
        "what": "width of Cohen's kappa's 95% interval (scorer/agreement.py) at n labelled contexts, drawn from the "
                "local judge's verdicts against the labelled sets, and the share of intervals holding the pool's "
                "kappa; contexts drawn one by one, or whole cases (retrievals) until n",
        "pool": {"cases": len(by_case), "contexts": whole.total, **whole.as_dict()},
        "sizes": sizes,
        "seed": SEED,
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 samples per size instead of 2,000")
    args = parser.parse_args(argv)
    result = measure(300 if args.quick else 2000)
    path: Path = write_result("kappa_interval", result, quick=args.quick)
    pool = result["pool"]
    print(f"pool: {pool['cases']} cases, {pool['contexts']} contexts, kappa {pool['kappa']} "
          f"(95% {pool['kappa_interval_95']})")
    for n, modes in result["sizes"].items():
        for mode, row in modes.items():
            print(f"n={n:>5} by {mode:<8}: width mean {row['width_mean']:.3f} (p5 {row['width_p5']:.3f}, "
                  f"p95 {row['width_p95']:.3f}), coverage {row['coverage']:.3f}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
