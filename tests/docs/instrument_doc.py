"""docs/INSTRUMENT.md's code comes from the apps the real-traffic tests run: each snippet in the
doc names a region of an app file (`<!-- snippet PATH#NAME -->`), marked there between
`# doc: NAME` and `# end doc` (`//` in JavaScript), and is rewritten from it.

    .venv/bin/python -m tests.docs.instrument_doc        # rewrite the doc's snippets from the apps
"""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "docs" / "INSTRUMENT.md"
APP_DIRS = (ROOT / "tests" / "realtraffic" / "apps", ROOT / "tests" / "realtraffic" / "agents",
            ROOT / "tests" / "realtraffic" / "js" / "apps", ROOT / "tests" / "realtraffic" / "js" / "lib")
LANGUAGE = {".py": "python", ".mjs": "js"}
_START = re.compile(r"^\s*(?:#|//) doc: (?P<name>[\w.-]+)\s*$")
_END = re.compile(r"^\s*(?:#|//) end doc\s*$")
_SNIPPET = re.compile(r"<!-- snippet (?P<path>[\w./-]+)#(?P<name>[\w.-]+) -->\n```\w*\n.*?```\n<!-- /snippet -->",
                      re.S)


def regions(path: Path) -> dict[str, str]:
    """The marked regions of one file, dedented, by name."""
    found: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if (start := _START.match(line)) is not None:
            if name is not None:
                raise ValueError(f"{path}:{number}: region {start['name']} opens inside region {name}")
            name, lines = start["name"], []
        elif _END.match(line):
            if name is None:
                raise ValueError(f"{path}:{number}: `end doc` outside a region")
            if name in found:
                raise ValueError(f"{path}: two regions named {name}")
            found[name] = textwrap.dedent("\n".join(lines)).strip("\n") + "\n"
            name = None
        elif name is not None:
            lines.append(line)
    if name is not None:
        raise ValueError(f"{path}: region {name} is never closed")
    return found


def all_regions() -> dict[tuple[str, str], str]:
    """Every region of the apps, by (path from the repository root, name)."""
    return {(str(path.relative_to(ROOT)), name): code
            for folder in APP_DIRS for path in sorted(folder.rglob("*"))
            if path.suffix in LANGUAGE and "node_modules" not in path.parts
            for name, code in regions(path).items()}


def render(text: str) -> str:
    """The doc with every snippet rewritten from the region it names."""
    found = all_regions()

    def snippet(match: re.Match[str]) -> str:
        key = (match["path"], match["name"])
        if key not in found:
            raise KeyError(f"docs/INSTRUMENT.md names {key[0]}#{key[1]}, which no app marks")
        language = LANGUAGE[Path(key[0]).suffix]
        return f"<!-- snippet {key[0]}#{key[1]} -->\n```{language}\n{found[key]}```\n<!-- /snippet -->"

    return _SNIPPET.sub(snippet, text)


def named(text: str) -> set[tuple[str, str]]:
    return {(m["path"], m["name"]) for m in _SNIPPET.finditer(text)}


if __name__ == "__main__":
    PATH.write_text(render(PATH.read_text(encoding="utf-8")), encoding="utf-8")
    sys.exit(0)
