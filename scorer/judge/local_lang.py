"""Which language a text is in, for the local judge: by script, then by CLD2 (pycld2) for Latin text.

Scripts decide first, without a model: Hangul is Korean; kana is Japanese; Han without kana is
Chinese; Cyrillic, Greek, Arabic, Hebrew, Devanagari and Thai text is a language the judge has no
word rules for. Latin text goes to CLD2, Chromium's compact language detector (tables compiled
into its wheel: nothing to load, about 15 us a text); docs/LOCAL_JUDGE.md records how it compared
with py3langid, lingua and whatlang on the development texts.

A sample's language comes from its query and answer together (more text, a surer guess). A
context keeps that language unless it is clearly in another one: CLD2 names another language
*and* the context reads like it (more of that language's function words than of the sample's,
or, for a language without word lists, none of the sample's in a context of six words or more).
Short rows and labels ("Pro: 29 €/mes") are too short to tell and stay in the sample's language."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import pycld2

from ctxprec.scorer.judge.local_words import fold_accents, word_data

# Languages with word rules: Latin ones through a Snowball stemmer and word lists, the CJK ones
# through a segmenter or morphological analyser.
LATIN = ("en", "de", "es", "pt", "fr", "it", "nl")
SUPPORTED = frozenset(LATIN + ("zh", "ja", "ko"))
NAMES = {
    "en": "English", "de": "German", "es": "Spanish", "pt": "Portuguese", "fr": "French", "it": "Italian",
    "nl": "Dutch", "zh": "Chinese", "ja": "Japanese", "ko": "Korean",
}


@dataclass(frozen=True, slots=True)
class Language:
    code: str  # ISO 639-1 where known ("en", "sv"), else "un"
    script: str  # "Latin", "Han", "Japanese", "Hangul", "Cyrillic", ...
    name: str  # for reasons: "German", "Swedish", "an unidentified language in Cyrillic script"

    @property
    def supported(self) -> bool:
        return self.code in SUPPORTED


_SCRIPTS: tuple[tuple[str, tuple[tuple[int, int], ...]], ...] = (
    ("kana", ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))),
    ("Han", ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0xF900, 0xFAFF))),
    ("Hangul", ((0xAC00, 0xD7AF), (0x1100, 0x11FF), (0x3130, 0x318F))),
    ("Cyrillic", ((0x0400, 0x052F),)),
    ("Greek", ((0x0370, 0x03FF),)),
    ("Arabic", ((0x0600, 0x06FF), (0x0750, 0x077F))),
    ("Hebrew", ((0x0590, 0x05FF),)),
    ("Devanagari", ((0x0900, 0x097F),)),
    ("Thai", ((0x0E00, 0x0E7F),)),
)
_WORD_RE = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")
_SAMPLE_CHARS = 2000


def script_of(char: str) -> str | None:
    code = ord(char)
    if code < 0x0250:
        return "Latin" if char.isalpha() else None
    for name, ranges in _SCRIPTS:
        for low, high in ranges:
            if low <= code <= high:
                return name
    if char.isalpha():
        return "Latin" if 0x1E00 <= code <= 0x1EFF else "other"
    return None


def dominant_script(text: str) -> str | None:
    sample = text[:_SAMPLE_CHARS]
    if sample.isascii():
        return "Latin" if any(ch.isalpha() for ch in sample) else None
    counts: dict[str, int] = {}
    for char, seen in Counter(sample).items():
        script = script_of(char)
        if script is not None:
            counts[script] = counts.get(script, 0) + seen
    if not counts:
        return None
    kana, han = counts.get("kana", 0), counts.get("Han", 0)
    # Japanese mixes kana with Han; a little kana is enough once the CJK share is real.
    if kana and kana + han >= 0.3 * sum(counts.values()):
        return "Japanese"
    top = max(counts, key=lambda s: counts[s])
    return "Japanese" if top == "kana" else top


def _cld2(text: str) -> tuple[str, bool]:
    """CLD2's best language code for Latin text and whether it calls itself reliable."""
    try:
        reliable, _, details = pycld2.detect(text[:_SAMPLE_CHARS], bestEffort=True)
    except (pycld2.error, ValueError):  # invalid UTF-8 (lone surrogates): clean it, try once more
        try:
            cleaned = text[:_SAMPLE_CHARS].encode("utf-8", "ignore").decode("utf-8")
            reliable, _, details = pycld2.detect(cleaned, bestEffort=True)
        except (pycld2.error, ValueError):
            return "un", False
    code = details[0][1] if details else "un"
    return code.split("-")[0], bool(reliable)


def _function_words(text: str, language: str) -> int:
    stop = word_data(language).stopwords
    return sum(1 for word in _WORD_RE.findall(text.lower()) if word in stop or fold_accents(word) in stop)


def _by_script(script: str, text: str) -> Language | None:
    if script == "Hangul":
        return Language("ko", script, NAMES["ko"])
    if script == "Japanese":
        return Language("ja", script, NAMES["ja"])
    if script == "Han":
        return Language("zh", script, NAMES["zh"])
    if script != "Latin":
        code, reliable = _cld2(text)
        name = _cld2_name(code) if reliable and code != "un" else f"an unidentified language in {script} script"
        return Language(code if reliable else "un", script, name)
    return None


def _cld2_name(code: str) -> str:
    for name, short in pycld2.LANGUAGES:
        if short == code:
            return name.capitalize()
    return code


def identify(text: str) -> Language:
    """The language of one text on its own (a sample's query and answer, together)."""
    script = dominant_script(text) or "Latin"
    known = _by_script(script, text)
    if known is not None:
        return known
    code, reliable = _cld2(text)
    if code in LATIN:
        return Language(code, "Latin", NAMES[code])
    # CLD2 knows no better: the supported language whose function words the text uses most.
    counts = {lang: _function_words(text, lang) for lang in LATIN}
    best = max(LATIN, key=lambda lang: counts[lang])
    if counts[best] and (not reliable or code == "un"):
        return Language(best, "Latin", NAMES[best])
    if reliable and code != "un":
        return Language(code, "Latin", _cld2_name(code))
    return Language(best, "Latin", NAMES[best]) if counts[best] else Language("en", "Latin", NAMES["en"])


def identify_context(text: str, sample: Language) -> Language:
    """A context's language: the sample's, unless the context is clearly in another one."""
    script = dominant_script(text)
    if script is None:
        return sample  # figures and symbols only
    if script != "Latin" or sample.script != "Latin":
        if script == sample.script or (script == "Han" and sample.code == "ja"):
            return sample  # Han in a Japanese sample is Japanese (a title, a heading)
        return _by_script(script, text) or Language("un", script, f"an unidentified language in {script} script")
    ours = _function_words(text, sample.code) if sample.code in LATIN else 0
    if ours >= 3:  # reads like the sample's language: no need to ask CLD2
        return sample
    code, reliable = _cld2(text)
    if code == sample.code or code == "un" or not reliable:
        return sample
    if code in LATIN:
        theirs = _function_words(text, code)
        return Language(code, "Latin", NAMES[code]) if theirs > ours else sample
    words = len(_WORD_RE.findall(text))
    return Language(code, "Latin", _cld2_name(code)) if ours == 0 and words >= 6 else sample
