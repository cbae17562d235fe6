"""The local judge's word lists, read from data files (`local_data/<language>.txt`), one per language.

Each file has sections, each a list of words or of pairs:

- `[stopwords]`: function words, dropped;
- `[weak]`: generic words (`time`, `people`, units), kept but weighing little: sharing one is no
  sign that a context supports an answer;
- `[negation]`: words (for Chinese, Japanese and Korean: morphemes) that deny what a sentence says;
- `[absence]`: words that say something is missing ("without"): a denial in an answer, but
  too often only a condition in a context;
- `[numbers]`: spelled-out numbers and their digits ("twelve characters" meets "12 characters");
- `[forms]`: a word form and the word it is read as, for forms a stemmer cannot join (`stolen`
  `steal`, British spellings);
- `[endings]`: a word ending and the one it is read as, for derivations the stemmer leaves apart
  (`invasion` / `invade`);
- `[synonyms]`: one group a line, comma-separated: words that can mean the same thing; a member may
  be a phrase of up to three words.

Lists are general-purpose, written from general knowledge, not drawn from any labelled case.
Accents are folded on reading, so a list matches text written with or without them."""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

SECTIONS = ("stopwords", "weak", "negation", "absence", "numbers", "forms", "endings", "synonyms")


@lru_cache(maxsize=65536)
def fold_accents(word: str) -> str:
    if word.isascii():
        return word
    decomposed = unicodedata.normalize("NFD", word)
    return unicodedata.normalize("NFC", "".join(ch for ch in decomposed if not unicodedata.combining(ch)))


@dataclass(frozen=True)
class WordData:
    language: str
    stopwords: frozenset[str] = frozenset()
    weak: frozenset[str] = frozenset()
    negation: frozenset[str] = frozenset()
    absence: frozenset[str] = frozenset()
    numbers: dict[str, str] = field(default_factory=dict)
    forms: dict[str, str] = field(default_factory=dict)
    endings: tuple[tuple[str, str], ...] = ()
    synonyms: tuple[tuple[str, ...], ...] = ()


def parse(text: str, language: str, source: str = "word data") -> WordData:
    """A data file's text -> WordData. An unknown section or a malformed pair names its line."""
    lines: dict[str, list[str]] = {name: [] for name in SECTIONS}
    section: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            if section not in lines:
                raise ValueError(f"{source} line {number}: unknown section [{section}]; one of {', '.join(SECTIONS)}")
            continue
        if section is None:
            raise ValueError(f"{source} line {number}: text before the first [section]")
        lines[section].append(line)
        if section in ("numbers", "forms", "endings") and len(line.split()) != 2:
            raise ValueError(f"{source} line {number}: [{section}] takes two words a line, not {line!r}")

    def words(name: str) -> frozenset[str]:
        found = {word.lower() for line in lines[name] for word in line.split()}
        return frozenset(found | {fold_accents(word) for word in found})

    def pairs(name: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in lines[name]:
            key, value = line.lower().split()
            out[key] = value
            out.setdefault(fold_accents(key), value)
        return out

    groups = tuple(
        members for members in (tuple(m.strip() for m in line.split(",") if m.strip()) for line in lines["synonyms"])
        if len(members) >= 2
    )
    return WordData(
        language=language,
        stopwords=words("stopwords"),
        weak=words("weak"),
        negation=words("negation"),
        absence=words("absence"),
        numbers=pairs("numbers"),
        forms=pairs("forms"),
        endings=tuple((line.split()[0].lower(), line.split()[1].lower()) for line in lines["endings"]),
        synonyms=groups,
    )


@lru_cache(maxsize=32)
def word_data(language: str) -> WordData:
    """The word lists of a language (empty lists for a language without a data file)."""
    path = resources.files("ctxprec.scorer.judge").joinpath("local_data", f"{language}.txt")
    if not path.is_file():
        return WordData(language)
    return parse(path.read_text(encoding="utf-8"), language, f"local_data/{language}.txt")
