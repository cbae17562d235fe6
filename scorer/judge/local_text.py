"""Text -> matchable terms for the local judge, in English, French, Japanese, or by characters.

The language of a sample is told from its script and its commonest words, with no model:
kana means Japanese; Han without kana, Cyrillic, Arabic and the other non-Latin scripts are
judged by character n-grams (no word rules we could trust); Latin text is French when French
function words and elisions outnumber English ones, English otherwise.

A term is what two texts must share to count as the same word:

- English: a lowercased content word through a stemmer (`local_stem`: Porter's steps plus
  irregular forms and British spellings, so `produced` / `production` and `stolen` / `theft`
  meet); acronyms (`LEDs`), letter-digit tokens (`CO2`) and code calls (`sorted()`) as they are;
- French: the same after elision is cut (`l'eau` -> `eau`; `l'Espagne` is still a name), accents
  folded for matching (`éléments` meets `elements`), the feminine read as the masculine and a
  light French stemmer applied;
- Japanese: character bigrams of each kanji or katakana run (there are no spaces to split on),
  a lone kanji as itself (a word before a particle, a stem before other kana); hiragana runs,
  which are mostly particles and verb endings, are dropped; Latin words and numbers inside
  Japanese text are read as English terms; each kanji is also kept alone, as a weak signal;
- other scripts: character trigrams of each word (bigrams for scripts written without spaces).

Every term also carries a *strength*: numbers and name-like words carry facts (strong); words
that appear in any text about anything (`time`, `people`, `make`) say little (weak). A text
also names the synonym groups (`local_synonyms`) its words and phrases belong to, and what its
small figures count ("3 to 5 business days")."""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

from ctxprec.scorer.judge.local_words import (
    EN_STOPWORDS,
    EN_WEAK,
    FR_STOPWORDS,
    FR_WEAK,
    JA_WEAK,
    number_word,
)
from ctxprec.scorer.judge.local_stem import english_stem, french_stem
from ctxprec.scorer.judge.local_synonyms import EN_GROUPS, FR_GROUPS, japanese_index, latin_index

STRONG = 2.0  # numbers and names
NORMAL = 1.0
WEAK = 0.35  # generic words: a match on one of them alone is no evidence
# A character n-gram of another script is a piece of a word, so it weighs less than a word.
GRAM = 0.55
SINGLE_KANJI = 0.5  # a one-kanji word (塩, 涙) between kana: often meaningful, but short
KATAKANA_WORD = 1.5  # a whole katakana word, split over its bigrams


@dataclass(frozen=True, slots=True)
class Language:
    code: str  # "en" | "fr" | "ja" | "chars"
    script: str  # "Latin", "Japanese", "Han", "Cyrillic", ...

    @property
    def lexical(self) -> bool:
        """True when word rules (stopwords, stemming) apply; False for character overlap only."""
        return self.code != "chars"


ENGLISH = Language("en", "Latin")
FRENCH = Language("fr", "Latin")
JAPANESE = Language("ja", "Japanese")


@dataclass(slots=True)
class Terms:
    weights: dict[str, float] = field(default_factory=dict)  # term -> strength (the highest seen)
    surface: dict[str, str] = field(default_factory=dict)  # term -> the text it came from, for reasons
    numbers: set[str] = field(default_factory=set)
    # Capitalised only where a sentence starts: name or not, this text cannot tell.
    unsure: set[str] = field(default_factory=set)
    # Synonym groups (local_synonyms) the text names: group -> weight, and which members
    # named it (a stem tuple, or a Japanese substring), so the same word is not counted twice.
    concepts: dict[str, float] = field(default_factory=dict)
    concept_members: dict[str, set[object]] = field(default_factory=dict)
    concept_surface: dict[str, str] = field(default_factory=dict)
    # Figures and what they count ("3 to 5 business days" -> {"day": {"3", "5"}, ...}).
    quantities: dict[str, set[str]] = field(default_factory=dict)
    # Japanese only: the kanji of the text, one by one. Two words that share a kanji often share
    # a meaning (脱水 and 水分, 病気 and 病原体): a weak signal, used when the words differ.
    kanji: set[str] = field(default_factory=set)

    @property
    def words(self) -> frozenset[str]:
        return frozenset(self.weights)

    def add(self, term: str, weight: float, surface: str) -> None:
        if weight > self.weights.get(term, 0.0):
            self.weights[term] = weight
        self.surface.setdefault(term, surface)

    def add_concept(self, group: str, weight: float, member: object, surface: str) -> None:
        if weight > self.concepts.get(group, 0.0):
            self.concepts[group] = weight
        self.concept_members.setdefault(group, set()).add(member)
        self.concept_surface.setdefault(group, surface)


# --- language --------------------------------------------------------------------------------

_SCRIPTS: tuple[tuple[str, tuple[tuple[int, int], ...]], ...] = (
    ("kana", ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))),
    ("Han", ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0xF900, 0xFAFF))),
    ("Hangul", ((0xAC00, 0xD7AF), (0x1100, 0x11FF))),
    ("Cyrillic", ((0x0400, 0x052F),)),
    ("Greek", ((0x0370, 0x03FF),)),
    ("Arabic", ((0x0600, 0x06FF), (0x0750, 0x077F))),
    ("Hebrew", ((0x0590, 0x05FF),)),
    ("Devanagari", ((0x0900, 0x097F),)),
    ("Thai", ((0x0E00, 0x0E7F),)),
)
# Scripts written without spaces between words: their n-grams are bigrams, not trigrams.
_UNSPACED = frozenset({"Han", "Thai", "kana"})
_FR_MARKERS = re.compile(r"\b(?:[ldjmnstc]|qu)['’](?=\w)|\b(?:le|la|les|des|du|une|et|est|sont|dans|pour|avec|sur|qui|que|pas|au|aux|ce|cette|il|elle|nous|vous|leur|à|où)\b", re.IGNORECASE)
_EN_MARKERS = re.compile(r"\b(?:the|and|of|to|is|are|was|in|that|it|for|on|with|as|by|this|which|what|how|who|an|a)\b", re.IGNORECASE)


def script_of(char: str) -> str | None:
    code = ord(char)
    for name, ranges in _SCRIPTS:
        for low, high in ranges:
            if low <= code <= high:
                return name
    if char.isalpha():
        return "Latin" if code < 0x0250 or 0x1E00 <= code <= 0x1EFF else "other"
    return None


def detect_language(text: str) -> Language:
    """The sample's language, from a few thousand characters of its text."""
    counts: dict[str, int] = {}
    # Count each distinct character once per occurrence, but look its script up only once.
    for char, seen in Counter(text[:4000]).items():
        script = script_of(char)
        if script is not None:
            counts[script] = counts.get(script, 0) + seen
    letters = sum(counts.values())
    if not letters:
        return ENGLISH
    kana, han = counts.get("kana", 0), counts.get("Han", 0)
    # Japanese mixes kana with Han; a little kana is enough (names, loanwords) once the CJK share is real.
    if kana and (kana + han) >= 0.3 * letters:
        return JAPANESE
    top = max(counts, key=lambda s: counts[s])
    if top not in ("Latin", "kana"):
        return Language("chars", "other" if top == "other" else top)
    sample = text[:4000]
    french = len(_FR_MARKERS.findall(sample))
    english = len(_EN_MARKERS.findall(sample))
    return FRENCH if french > english else ENGLISH


# --- terms -----------------------------------------------------------------------------------

_DIGIT_GROUP_RE = re.compile(r"(?<=\d)[,\s\u202f\u00a0](?=\d{3}\b)")
_SPACE_GROUP_RE = re.compile(r"(?<=\d)[\s\u202f\u00a0](?=\d{3}\b)")
_DECIMAL_RE = re.compile(r"(?<=\d),(?=\d)")
# Letters then digits make one token (CO2, H2O, MP3, B12): a chemical or a model name, not a word and a count.
_WORD_RE = re.compile(
    r"[A-Za-z]+\d+[A-Za-z\d]*\b|\d+(?:\.\d+)?(?:st|nd|rd|th|e|er|ème)?\b|\d+(?:\.\d+)?|[^\W\d_]+(?:['’][^\W\d_]+)*"
)
_SENTENCE_END = ".!?:;\n。！？"


def _normalise(text: str) -> str:
    # NFKC turns full-width digits and letters into ASCII and "℃" into "°C", so Japanese and
    # Western spellings of the same number meet.
    return unicodedata.normalize("NFKC", text)


def fold_accents(word: str) -> str:
    decomposed = unicodedata.normalize("NFD", word)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _is_name_like(text: str, start: int, raw: str) -> bool:
    """Capitalised mid-sentence: a name, which carries a fact. A capital right after a sentence
    end (or at the start) is grammar."""
    if not raw[:1].isupper():
        return False
    before = text[max(0, start - 3) : start].rstrip(" \"'«(“")
    return bool(before) and before[-1] not in _SENTENCE_END


def terms(text: str, language: Language = ENGLISH) -> Terms:
    text = _normalise(text)
    if language.code == "ja":
        return _japanese_terms(text)
    if language.code == "chars":
        return _char_terms(text, bigrams=language.script in _UNSPACED)
    return _latin_terms(text, french=language.code == "fr")


def _latin_terms(text: str, *, french: bool, out: Terms | None = None) -> Terms:
    out = out if out is not None else Terms()
    if french:
        # French writes decimals with a comma (42,195 km) and groups thousands with a space.
        text = _SPACE_GROUP_RE.sub("", _DECIMAL_RE.sub(".", text))
    else:
        text = _DIGIT_GROUP_RE.sub("", text)
    if not french:
        for call in _CODE_CALL_RE.finditer(text):
            # `sorted(x)`, `list.sort()`: a function named in code is a fact, not an English word.
            out.add(call.group(1).lower() + "()", STRONG, call.group(1) + "()")
    starts: set[str] = set()
    # Every word's key, stopwords included, for the synonym groups' phrases ("straight away")
    # and for what a figure counts. Each entry: (key, term weight or 0 for a stopword, surface);
    # a number is (its digits, -1, surface) and breaks a phrase.
    sequence: list[tuple[str, float, str]] = []
    for match in _WORD_RE.finditer(text):
        raw = match.group(0)
        if raw[0].isdigit():
            _add_number(out, raw.lower())
            sequence.append((raw.lower(), -1.0, raw))
            continue
        lower = raw.lower().replace("’", "'")
        if len(raw) == 1:
            sequence.append((lower, 0.0, lower))
            # "Vitamin D", "type O", "plan B": a lone capital mid-sentence names something.
            if raw.isupper() and raw != "I" and _is_name_like(text, match.start(), raw):
                out.add(raw.lower() + "_", STRONG, raw)
            continue
        digits = number_word(_ELISION_RE.sub("", lower) if french else lower, french)
        if digits is not None:
            _add_number(out, digits, lower)
            sequence.append((digits, -1.0, lower))
            continue
        if not raw.isalpha() and any(ch.isdigit() for ch in raw) or _ACRONYM_RE.fullmatch(raw):
            # "LEDs", "APIs", "US", "CO2": an acronym is not an English word to stem ("LED" is
            # not "lead").
            term, strength = lower[:-1] if raw.endswith("s") and raw[:-1].isupper() else lower, NORMAL
        elif french:
            term, strength = _french_term(lower)
        else:
            term, strength = _english_term(lower)
        if term is None:
            sequence.append((latin_key(lower, french), 0.0, lower))
            continue
        # A French name after an elided article ("l'Espagne") is capitalised after the apostrophe.
        core = raw[len(_ELISION_RE.match(lower).group(0)):] if french and _ELISION_RE.match(lower) else raw
        if core[:1].isupper():
            if _is_name_like(text, match.start(), core):
                strength = STRONG
            elif term not in out.weights:
                starts.add(term)
        else:
            starts.discard(term)
        out.add(term, strength, lower)
        sequence.append((term, strength, lower))
    out.unsure |= {t for t in starts if out.weights.get(t, 0.0) < STRONG}
    _latin_concepts(sequence, out, french)
    _quantities(sequence, out)
    return out


def _quantities(sequence: list[tuple[str, float, str]], out: Terms) -> None:
    """What each figure counts: the next two content words after a run of figures ("3 to 5
    business days": 3 and 5 count business and days), so that "1-2 business days" can be seen
    to contradict "3 to 5 business days" although small figures are not strong terms."""
    pending: list[str] = []
    units_left = 0
    for key, weight, _ in sequence:
        if weight < 0:
            if units_left < 2:  # a new run of figures, not a range's second end
                pending = [] if units_left == 0 else pending
            pending.append(key)
            units_left = 2
        elif weight > 0 and pending:
            out.quantities.setdefault(key, set()).update(pending)
            units_left -= 1
            if units_left == 0:
                pending = []


def latin_key(word: str, french: bool) -> str:
    """The form a word takes in a synonym group's index: the term it would be, stopword or not."""
    if french:
        return french_stem(fold_accents(_ELISION_RE.sub("", word)))
    return english_stem(word[:-2] if word.endswith("'s") else word)


def _latin_concepts(sequence: list[tuple[str, float, str]], out: Terms, french: bool) -> None:
    """Name the synonym groups the text's words and phrases (up to three words) belong to."""
    index, starts = latin_index(FR_GROUPS if french else EN_GROUPS, _french_member_key if french else _english_member_key)
    for i, item in enumerate(sequence):
        key1, weight, surface = item
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


def _english_member_key(word: str) -> str:
    return latin_key(word, False)


def _french_member_key(word: str) -> str:
    return latin_key(word, True)


def _add_number(out: Terms, number: str, surface: str | None = None) -> None:
    """Numbers carry facts, but small counts (2, 3) turn up in text about anything, so only
    numbers from 10 up, decimals and ordinals count as strong."""
    small = number.isdigit() and len(number) == 1
    out.add(number, NORMAL if small else STRONG, surface or number)
    if number[-1].isdigit():
        out.numbers.add(number)


_CODE_CALL_RE = re.compile(r"\b(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)\((?=[\w)\"'])")
_ORDINAL_RE = re.compile(r"(?:st|nd|rd|th|e|er|ème)$")
# Two capitals or more, with an optional plural s: LED, LEDs, API, URLs, US.
_ACRONYM_RE = re.compile(r"[A-Z][A-Z0-9]+s?")


def _english_term(lower: str) -> tuple[str | None, float]:
    if lower in EN_STOPWORDS:
        return None, 0.0
    if lower.endswith("'s"):
        lower = lower[:-2]
    term = english_stem(lower)
    if len(term) < 2:
        return None, 0.0
    return term, WEAK if lower in EN_WEAK or term in EN_WEAK else NORMAL


_ELISION_RE = re.compile(r"^(?:[ldjmnstc]|qu|jusqu|lorsqu|puisqu|quoiqu)'")


def _french_term(lower: str) -> tuple[str | None, float]:
    lower = _ELISION_RE.sub("", lower)
    folded = fold_accents(lower)
    if not folded or folded in FR_STOPWORDS:
        return None, 0.0
    term = french_stem(folded)
    if len(term) < 2:
        return None, 0.0
    return term, WEAK if folded in FR_WEAK or term in FR_WEAK else NORMAL


_JA_RUN_RE = re.compile(
    r"(?P<kanji>[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff々〆ヶ]+)"
    r"|(?P<katakana>[\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff]+)"
    r"|(?P<hiragana>[\u3040-\u309f]+)"
    r"|(?P<latin>[A-Za-z0-9][A-Za-z0-9.,'’\-]*)"
)


def _japanese_terms(text: str) -> Terms:
    out = Terms()
    for member, group in japanese_index():
        if member in text:
            out.add_concept(group, NORMAL, member, member)
    for match in _JA_RUN_RE.finditer(text):
        kind = match.lastgroup
        run = match.group(0)
        if kind == "hiragana":
            continue
        if kind == "latin":
            # Romaji, acronyms, brand names and numbers inside Japanese text: read as English.
            # Capitalised Latin words in Japanese text are names (there is no sentence case).
            before = len(out.weights)
            _latin_terms(run.rstrip(".,-"), french=False, out=out)
            if run[:1].isupper():
                for term in list(out.weights)[before:]:
                    out.weights[term] = STRONG
            continue
        run = run.strip("ー")
        if not run:
            continue
        if kind == "kanji":
            for char in run:
                if char not in JA_WEAK and char not in "々〆ヶ":
                    out.kanji.add(char)
        if len(run) == 1:
            # A lone kanji before a particle or a stop is a word (赤は, 塩を, 水、); before other
            # kana it is mostly a verb or adjective stem (付け, 増え), which says less.
            following = text[match.end() : match.end() + 1]
            whole = not following or following in _JA_PARTICLES or not following.isalpha()
            out.add(run, WEAK if run in JA_WEAK else NORMAL if whole else SINGLE_KANJI, run)
            continue
        # A run of n characters gives n-1 bigrams but holds about n/2 words (two-kanji words are
        # the norm), so its bigrams share that weight. Katakana runs are mostly names and
        # loanwords, one word each, and carry facts as capitalised words do; units are generic.
        if kind == "katakana":
            total = WEAK if run in JA_WEAK else KATAKANA_WORD
        else:
            total = max(1.0, len(run) / 2)
        per_gram = total / (len(run) - 1)
        for i in range(len(run) - 1):
            gram = run[i : i + 2]
            out.add(gram, WEAK if gram in JA_WEAK else per_gram, run)
    return out


_JA_PARTICLES = frozenset("はがをのにともでやへ")
_LETTER_RUN_RE = re.compile(r"\d+(?:[.,]\d+)?|[^\W\d_]+")


def _char_terms(text: str, *, bigrams: bool) -> Terms:
    out = Terms()
    size = 2 if bigrams else 3
    for match in _LETTER_RUN_RE.finditer(text):
        run = match.group(0)
        if run[0].isdigit():
            number = run.replace(",", ".")
            out.add(number, STRONG, run)
            out.numbers.add(number)
            continue
        lower = run.lower()
        if len(lower) <= size:
            # Short words of spaced scripts are mostly function words; keep them weak.
            out.add(lower, GRAM if bigrams else WEAK * GRAM, run)
            continue
        for i in range(len(lower) - size + 1):
            out.add(lower[i : i + size], GRAM, run)
    return out
