"""English and French stemmers for the local judge: words that differ only by an ending meet.

English: irregular forms first (`stolen` -> `steal`, `children` -> `child`), British spellings
folded to American ones (`colour` -> `color`, `organise` -> `organize`), then the Porter
algorithm (M. F. Porter, 1980), which strips inflections and derivations in steps
(`activation` / `activate` / `activity` -> `activ`), with a few derivations Porter leaves apart
(`invasion` / `invade`, `failure` / `fail`, `theft` / `thief`).

French: a light stemmer on accent-folded words (plural and feminine endings, the commonest
derivational and verb endings), so that "réinitialiser" meets "réinitialisation".

Both must be deterministic and cheap: they run on every word of every judged context."""
from __future__ import annotations

from functools import lru_cache

# Irregular verbs and plurals Porter cannot join to their base form. General English, not
# drawn from any labelled case. Values are base forms; they are stemmed like any word.
_EN_IRREGULAR: dict[str, str] = {}
for _base, _forms in {
    "eat": "ate eaten", "steal": "stole stolen theft thief thieves", "lose": "lost loss losses",
    "fall": "fell fallen", "begin": "began begun beginning", "buy": "bought", "bring": "brought",
    "catch": "caught", "teach": "taught", "think": "thought", "sell": "sold sale sales",
    "tell": "told", "hold": "held", "build": "built", "send": "sent", "spend": "spent",
    "grow": "grew grown growth", "drive": "drove driven", "write": "wrote written",
    "speak": "spoke spoken speech", "choose": "chose chosen choice", "freeze": "froze frozen",
    "break": "broke broken", "rise": "rose risen", "fight": "fought", "pay": "paid",
    "lead": "led", "feed": "fed", "meet": "met", "sit": "sat", "win": "won", "hide": "hid hidden",
    "bite": "bit bitten", "fly": "flew flown flight", "draw": "drew drawn", "throw": "threw thrown",
    "blow": "blew blown", "shake": "shook shaken", "wake": "woke woken", "wear": "wore worn",
    "tear": "tore torn", "dig": "dug", "hang": "hung", "strike": "struck", "sink": "sank sunk",
    "sing": "sang sung song", "swim": "swam swum", "drink": "drank drunk", "shrink": "shrank shrunk",
    "deal": "dealt", "sleep": "slept", "lend": "lent", "bend": "bent", "burn": "burnt",
    "learn": "learnt", "dream": "dreamt", "forget": "forgot forgotten", "forgive": "forgave forgiven",
    "understand": "understood", "stand": "stood", "die": "died dying dead death deaths",
    "lie": "lay lain lying", "ride": "rode ridden", "shoot": "shot", "shine": "shone",
    "hear": "heard", "seek": "sought", "fit": "fitted", "weigh": "weight weights",
    "high": "height heights", "long": "length lengths", "wide": "width widths", "deep": "depth depths",
    "strong": "strength", "child": "children", "man": "men", "woman": "women", "tooth": "teeth",
    "foot": "feet", "mouse": "mice", "goose": "geese", "leaf": "leaves", "life": "lives",
    "wife": "wives", "knife": "knives", "wolf": "wolves", "half": "halves", "shelf": "shelves",
    "calf": "calves", "loaf": "loaves", "person": "people persons", "criterion": "criteria",
    "phenomenon": "phenomena", "analysis": "analyses", "crisis": "crises", "diagnosis": "diagnoses",
    "thesis": "theses", "bacterium": "bacteria", "fungus": "fungi", "cactus": "cacti",
    "nucleus": "nuclei", "stimulus": "stimuli", "index": "indices", "matrix": "matrices",
    "vertex": "vertices", "medium": "media", "datum": "data", "good": "better best",
    "bad": "worse worst", "far": "further furthest farther farthest",
}.items():
    for _form in _forms.split():
        _EN_IRREGULAR[_form] = _base

# British spellings met as American ones (both texts go through the same folding).
_EN_SPELLING = {
    "centre": "center", "metre": "meter", "litre": "liter", "theatre": "theater", "fibre": "fiber",
    "tyre": "tire", "grey": "gray", "programme": "program", "defence": "defense", "offence": "offense",
    "licence": "license", "practise": "practice", "mould": "mold", "plough": "plow", "aluminium": "aluminum",
    "cheque": "check", "catalogue": "catalog", "dialogue": "dialog", "analyse": "analyze",
    "paralyse": "paralyze", "sceptical": "skeptical", "pyjamas": "pajamas", "kerb": "curb",
}
# Derivations Porter leaves apart: a verb and its -sion/-ption/-ure noun, matched as word
# endings so that prefixed forms ("subdivision") follow. Listed rather than ruled: "-sion" ->
# "-de" is right for "invasion" but wrong for "precision" or "confusion".
_EN_DERIVATIONS = tuple(
    (noun, verb) for noun, verb in (pair.split("/") for pair in """
    decision/decide division/divide provision/provide collision/collide invasion/invade
    evasion/evade persuasion/persuade explosion/explode erosion/erode corrosion/corrode
    conclusion/conclude inclusion/include exclusion/exclude intrusion/intrude extension/extend
    comprehension/comprehend suspension/suspend expansion/expand description/describe
    prescription/prescribe subscription/subscribe absorption/absorb consumption/consume
    assumption/assume resumption/resume reception/receive perception/perceive deception/deceive
    conception/conceive failure/fail closure/close exposure/expose departure/depart
    pressure/press mixture/mix seizure/seize permission/permit admission/admit
    transmission/transmit emission/emit omission/omit submission/submit solution/solve
    resolution/resolve evolution/evolve pollution/pollute destruction/destroy
    """.split())
)
_EN_OUR_KEEP = frozenset("flour flours devour devours detour detours contour contours amour".split())
_EN_BRITISH_ISE = ("ise", "ised", "ises", "ising", "isation", "isations", "iser", "isers")
_EN_ISE_KEEP = frozenset(
    "rise arise raise praise wise otherwise likewise noise poise promise premise surprise exercise "
    "advise revise devise supervise advertise compromise comprise enterprise expertise franchise "
    "merchandise treatise despise disguise excise incise concise precise paradise chemise "
    "cruise bruise cerise anise mortise".split()
)


@lru_cache(maxsize=65536)
def english_stem(word: str) -> str:
    """The stem two forms of an English word share: "produces", "produced", "producing" and
    "production" all give "produc"; "stolen" and "theft" give "steal"."""
    if not word.isalpha():
        return word
    word = _EN_IRREGULAR.get(word, word)
    word = _american(word)
    if len(word) <= 3:
        return word
    single = word[:-1] if word.endswith("s") else word
    for noun, verb in _EN_DERIVATIONS:
        if single.endswith(noun):
            word = single[: -len(noun)] + verb
            break
    # A second pass takes what the first one uncovered: "tiredness" -> "tired" -> "tire".
    return _porter(_porter(_comparative(word)))


# Words ending in -er that are not a comparative or agent of a shorter word they would meet.
_EN_ER_KEEP = frozenset(
    "flower shower tower power corner number letter butter offer cover lover liver tier ever never "
    "over under after other order matter water paper winter summer river silver mother father "
    "brother sister finger hammer ladder border banner dinner manner pepper copper member "
    "interest request suggest forest honest protest contest digest arrest harvest modest invest "
    "conquest manifest inquest".split()
)


def _comparative(word: str) -> str:
    """Porter leaves -er and -est on short stems ("lower", "slowest"); take them off so that
    "slower" meets "slow" and "bigger" meets "big" ("flower" stays a flower, not "flow")."""
    single = word[:-1] if word.endswith("ers") else word
    for ending in ("est", "er"):
        if single.endswith(ending) and len(single) - len(ending) >= 3 and single not in _EN_ER_KEEP:
            base = single[: -len(ending)]
            if _measure(base) > 1:
                return word  # long enough for Porter's own -er rule ("computer" / "compute")
            if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "ls":
                return base[:-1]  # "bigger" -> "big"
            return base + "e" if _cvc(base) else base  # "writer", "wider" -> "write", "wide"
    return word


def _american(word: str) -> str:
    if word in _EN_SPELLING:
        return _EN_SPELLING[word]
    for british, american in (("ours", "ors"), ("our", "or")):
        # colour, behaviour, neighbours; not "hour", "four", "tour", "your", "flour", "sour"
        if word.endswith(british) and len(word) - len(british) >= 3 and word not in _EN_OUR_KEEP:
            return word[: -len(british)] + american
    for ending in _EN_BRITISH_ISE:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            stem = word[: -len(ending)]
            if stem + "ise" not in _EN_ISE_KEEP:
                return stem + "iz" + ending[2:]
            break
    if word.startswith("haem") or word.startswith("anaem") or word.startswith("oesoph"):
        return word.replace("ae", "e", 1).replace("oe", "e", 1)
    return word


# --- Porter (1980) -----------------------------------------------------------------------------

_VOWELS = frozenset("aeiou")


def _consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in _VOWELS:
        return False
    if ch == "y":
        return i == 0 or not _consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in the stem."""
    m, previous_vowel = 0, False
    for i in range(len(stem)):
        vowel = not _consonant(stem, i)
        if previous_vowel and not vowel:
            m += 1
        previous_vowel = vowel
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    """Consonant-vowel-consonant at the end, the last not w, x or y ("hop", not "snow")."""
    if len(word) < 3:
        return False
    return (_consonant(word, len(word) - 3) and not _consonant(word, len(word) - 2)
            and _consonant(word, len(word) - 1) and word[-1] not in "wxy")


def _replace(word: str, rules: tuple[tuple[str, str], ...], min_measure: int) -> str:
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            return stem + replacement if _measure(stem) > min_measure - 1 else word
    return word


_STEP2 = (
    ("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
    ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"),
    ("ization", "ize"), ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"),
    ("fulness", "ful"), ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"),
    ("logi", "log"),
)
_STEP3 = (
    ("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""),
    ("ness", ""),
)
_STEP4 = (
    "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou",
    "ism", "ate", "iti", "ous", "ive", "ize",
)


def _porter(word: str) -> str:
    # Step 1a: plurals.
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss") and not word.endswith(("us", "is")):
        word = word[:-1]
    # Step 1b: -ed, -ing.
    extra = False
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    elif word.endswith("ed") and _has_vowel(word[:-2]):
        word, extra = word[:-2], True
    elif word.endswith("ing") and _has_vowel(word[:-3]):
        word, extra = word[:-3], True
    if extra:
        if word.endswith(("at", "bl", "iz")):
            word += "e"
        elif _double_consonant(word) and word[-1] not in "lsz":
            word = word[:-1]
        elif _measure(word) == 1 and _cvc(word):
            word += "e"
    # Step 1c: y -> i after a vowel-bearing stem ("happy" / "happiness").
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    word = _replace(word, _STEP2, 1)
    word = _replace(word, _STEP3, 1)
    # Step 4: derivational endings, when the rest is long enough.
    for suffix in _STEP4:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            if _measure(stem) > 1 and (suffix != "ion" or stem.endswith(("s", "t"))):
                word = stem
            break
    # Step 5: a final e, a final double l.
    if word.endswith("e"):
        stem = word[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            word = stem
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word


# --- French ------------------------------------------------------------------------------------

_FR_SUFFIXES = (
    "issements", "issement", "ements", "ement", "ations", "ation", "atrices", "atrice", "ateurs", "ateur",
    "euses", "euse", "eux", "ables", "able", "iques", "ique", "ismes", "isme", "istes", "iste", "ites", "ite",
    "ances", "ance", "ences", "ence", "antes", "ante", "ants", "ant", "aient", "ait", "ees", "ee", "es", "er",
    "ir", "ez", "ent", "e",
)

_FR_FEMININE = (("euse", "eu"), ("ive", "if"), ("elle", "el"), ("enne", "en"), ("iere", "ier"), ("ette", "et"))
_FR_INFLECTIONS = frozenset("aient ait ees ee es er ir ez ent e".split())


def french_stem(word: str) -> str:
    """A light French stemmer on accent-folded words: plural and feminine endings, and the
    commonest derivational and verb endings, so that "réinitialiser" meets "réinitialisation"."""
    if word.isdigit() or len(word) <= 3:
        return word
    if len(word) > 5 and word.endswith("aux"):
        word = word[:-3] + "al"
    elif word[-1] in "sx" and len(word) > 3:
        word = word[:-1]
    # The feminine as the masculine, once the plural is gone: "joyeuse" / "joyeu(x)",
    # "sportive" / "sportif", "naturelle" / "naturel", "première" / "premier".
    for feminine, masculine in _FR_FEMININE:
        if word.endswith(feminine) and len(word) - len(feminine) >= 3:
            word = word[: -len(feminine)] + masculine
            break
    for suffix in _FR_SUFFIXES:
        # Verb and agreement endings may leave a three-letter stem ("laver" / "lavez" -> "lav");
        # derivational ones need four, or short words lose their meaning.
        if word.endswith(suffix) and len(word) - len(suffix) >= (3 if suffix in _FR_INFLECTIONS else 4):
            word = word[: -len(suffix)]
            break
    if len(word) > 4 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]
    return word
