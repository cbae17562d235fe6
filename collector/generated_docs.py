"""The command line shared by the pages generated from the code (docs/CONFIG.md, docs/METRICS.md,
the conventions section of docs/FORMATS.md): rewrite the page, or `--check` that it is current."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable


def write_or_check(path: Path, render: Callable[[], str], module: str, description: str | None,
                   argv: list[str] | None = None) -> int:
    """Writes `render()` to `path`; with `--check`, exits 1 (naming `python -m module`) when the
    page differs instead."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help=f"exit 1 when {path.name} is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is out of date: run python -m {module}", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0
