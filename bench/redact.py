"""Throughput of PII redaction (scorer/redact.py) on 1 MB of support-ticket-like text, against a
baseline that makes a single regex pass over the same text (a naive e-mail-only redactor,
`\\S+@\\S+` -> [EMAIL]). ctxprec makes two passes (e-mails read outwards from each "@", then one
regex pass for cards and phones with Luhn and digit-count checks), so the ratio says what the
extra precision costs over the cheapest possible scan.

Two texts: `mixed` (about one e-mail, phone or card per 400 characters, plus the order ids,
dates, amounts and IP addresses that must survive) and `prose` (the same sentences without PII;
digits still present, so the digit passes still run).

    .venv/bin/python -m bench.redact [--quick]
"""
from __future__ import annotations

from bench.common import write_result

import argparse
import os
import platform
import random
import re
import statistics
import time
from pathlib import Path
from typing import Callable

from ctxprec.scorer.redact import redact

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024

_BASELINE_RE = re.compile(r"\S+@\S+")

_PROSE = [
    "Thanks for reaching out about order ORD-2026-{n6}; it shipped on 2026-11-{d2} at 14:{d2}.",
    "The invoice total was 1 {d3} {d3} EUR and the refund of {d2}.{d2} USD is on its way.",
    "Our server at 10.0.{d1}.{d2} answered in {d3} ms, version 4.{d1}.{d2} of the app.",
    "To reset your password open Settings, choose Security and follow the link we send.",
    "Ticket {n6} was merged into ticket {n6}; please reply to this thread with any update.",
    "The warehouse scanned parcel {n10} twice, which is why tracking looked stuck.",
]
_PII = [
    "You can reach me at {name}.{name}@example-mail.com if anything changes.",
    "Call me back on +44 20 {d4} {d4} or on my mobile 06 {d2} {d2} {d2} {d2}.",
    "My US number is ({d3}) {d3}-{d4}, best after 5 pm.",
    "I paid with the card 4111 1111 1111 1111 but the charge appears twice.",
    "Please send the receipt to {name}@{name}.org instead.",
]
_NAMES = ["alice", "bob", "chen", "dara", "emeka", "farah", "gus", "hana"]


def _fill(template: str, rng: random.Random) -> str:
    def digits(n: int) -> str:
        return "".join(rng.choice("0123456789") for _ in range(n))

    out = template
    for key, n in (("{n10}", 10), ("{n6}", 6), ("{d4}", 4), ("{d3}", 3), ("{d2}", 2), ("{d1}", 1)):
        while key in out:
            out = out.replace(key, digits(n), 1)
    while "{name}" in out:
        out = out.replace("{name}", rng.choice(_NAMES), 1)
    return out


def make_text(size: int, *, with_pii: bool, seed: int = 5) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    while total < size:
        pool = _PII if with_pii and rng.random() < 0.3 else _PROSE
        sentence = _fill(rng.choice(pool), rng)
        parts.append(sentence)
        total += len(sentence) + 1
    return " ".join(parts)[:size]


def baseline(text: str) -> str:
    return _BASELINE_RE.sub("[EMAIL]", text)


def ctxprec(text: str) -> str:
    return redact(text)[0]


def timed(fn: Callable[[str], str], text: str, repeats: int) -> float:
    """Median seconds of `repeats` runs (the machine is shared: the median resists outliers)."""
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn(text)
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 15
    results: dict[str, object] = {
        "description": "MB/s of scorer.redact.redact on 1 MB of text vs a single-regex pass (\\S+@\\S+ -> [EMAIL]) "
        "over the same text; median of repeats; ratio = ctxprec time / baseline time",
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "repeats": repeats,
    }
    for name, with_pii in (("mixed", True), ("prose", False)):
        text = make_text(MB, with_pii=with_pii)
        _, counts = redact(text)
        ours = timed(ctxprec, text, repeats)
        base = timed(baseline, text, repeats)
        size_mb = len(text.encode("utf-8")) / MB
        entry = {
            "mb": round(size_mb, 3),
            "replaced": counts.to_dict(),
            "ctxprec_mb_s": round(size_mb / ours, 1),
            "baseline_mb_s": round(size_mb / base, 1),
            "time_ratio_vs_baseline": round(ours / base, 2),
        }
        results[name] = entry
        print(
            f"{name:6s} {size_mb:.2f} MB  ctxprec {entry['ctxprec_mb_s']:7.1f} MB/s  "
            f"single-regex baseline {entry['baseline_mb_s']:7.1f} MB/s  ratio {entry['time_ratio_vs_baseline']:.2f}x  "
            f"replaced {counts.to_dict()}"
        )
    print(f"wrote {write_result('redact', results, quick=args.quick).relative_to(ROOT)}")


if __name__ == "__main__":
    main()
