"""The offline judge: agreement with the human-labelled cases, determinism, what it reports."""
from __future__ import annotations

import subprocess
import sys

import pytest
from ctxprec.scorer.judge.local import LocalJudge
from ctxprec.scorer.judge.local_eval import SETS, evaluate, load_cases
from ctxprec.scorer.judge.local_text import (
    ENGLISH,
    FRENCH,
    JAPANESE,
    STRONG,
    detect_language,
    fold_accents,
    terms,
)
from ctxprec.scorer.judge.local_stem import english_stem, french_stem


def test_labelled_set_is_big_enough_and_balanced() -> None:
    cases = load_cases()
    labels = [label for case in cases for label in case["labels"]]
    assert len(cases) >= 40 and len(labels) >= 200
    assert 0.3 < labels.count("relevant") / len(labels) < 0.7

def test_agreement_with_human_labels_is_at_least_85_percent() -> None:
    result = evaluate()
    assert result.rate >= 0.85, "\n".join(result.disagreements)
    # Both classes must be judged well, not one at the expense of the other.
    assert result.true_pos / (result.true_pos + result.false_neg) >= 0.8
    assert result.true_neg / (result.true_neg + result.false_pos) >= 0.8

def test_cli_prints_agreement_per_set_and_split() -> None:
    out = subprocess.run([sys.executable, "-m", "ctxprec.scorer.judge.local_eval"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert set(rows) == set(SETS)
    # The original set's row carries its own size: 46 cases, 231 contexts.
    assert rows["original"][1:3] == ["46", "231"]
    assert all(row[3].endswith("%") for row in rows.values())

async def test_verdicts_are_deterministic_and_say_they_are_local() -> None:
    judge = LocalJudge()
    case = load_cases()[0]
    first = await judge.judge(case["question"], case["contexts"], reference_kind="output", reference=case["answer"])
    second = await judge.judge(case["question"], case["contexts"], reference_kind="output", reference=case["answer"])
    assert first.verdicts == second.verdicts
    assert all(v.reason.startswith("local judge: ") for v in first.verdicts)
    assert first.usage.calls == 0 and first.usage.prompt_tokens == 0

async def test_numbers_and_answer_specific_words_decide() -> None:
    judge = LocalJudge()
    outcome = await judge.judge(
        "How tall is the Eiffel Tower?",
        ["The Eiffel Tower stands 330 metres tall.", "The Eiffel Tower was built by Gustave Eiffel's company."],
        reference_kind="output",
        reference="The Eiffel Tower is 330 metres tall.",
    )
    # Echoing the query's words (Eiffel, Tower) is on topic but does not support the answer.
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "330" in outcome.verdicts[0].reason

async def test_query_only_reference() -> None:
    outcome = await LocalJudge().judge(
        "symptoms of vitamin D deficiency",
        ["Vitamin D deficiency symptoms include bone pain.", "Parking is free on Sundays."],
        reference_kind="query",
        reference="",
    )
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "only the query was compared" in outcome.verdicts[0].reason

def test_stemming_and_terms() -> None:
    assert english_stem("produces") == english_stem("produced") == english_stem("producing") == english_stem("produce")
    assert english_stem("batteries") == english_stem("battery")
    t = terms("Costs rose to 7,500 dollars, said Alice.", ENGLISH)
    assert t.weights["7500"] == STRONG and "7500" in t.numbers
    assert t.weights[english_stem("alice")] == STRONG  # a name mid-sentence carries a fact
    assert not terms("the a of", ENGLISH).weights
    # Spelled-out numbers meet digits; a lone capital mid-sentence names something.
    assert "12" in terms("at least twelve characters", ENGLISH).numbers
    assert "d_" in terms("We need vitamin D daily.", ENGLISH).weights


def test_french_elision_accents_and_stems() -> None:
    words = terms("L'eau de la mer s'évapore ; qu'elle est salée ! Les éléments", FRENCH).weights
    assert "eau" in words and "mer" in words  # l'eau -> eau; stopwords (de, la, est) gone
    assert not {"de", "la", "est", "les", "qu", "l"} & set(words)
    assert french_stem(fold_accents("réinitialiser")) == french_stem("reinitialisation")  # accents folded, endings cut
    assert terms("les éléments", FRENCH).words == terms("les elements", FRENCH).words
    # French decimals use a comma; thousands a space.
    assert {"42.195", "1665"} <= terms("42,195 km et 1 665 marches", FRENCH).numbers


def test_japanese_bigrams_drop_kana_particles() -> None:
    t = terms("フレミングがペニシリンを発見した", JAPANESE)
    assert "フレ" in t.weights and "発見" in t.weights
    assert not any(ch in term for term in t.weights for ch in "がをした")  # hiragana are dropped
    assert terms("東京スカイツリーは2012年", JAPANESE).numbers == {"2012"}


def test_language_is_told_by_script_and_common_words() -> None:
    assert detect_language("Who discovered penicillin? Alexander Fleming did.").code == "en"
    assert detect_language("Qui a découvert la pénicilline ? C'est Fleming, en 1928.").code == "fr"
    assert detect_language("ペニシリンを発見したのは誰ですか？").code == "ja"
    assert detect_language("北京是中国的首都。").script == "Han"
    assert detect_language("Москва — столица России.").script == "Cyrillic"


async def test_reference_style_supporting_fact_is_relevant() -> None:
    outcome = await LocalJudge().judge(
        "Who discovered penicillin?",
        ["Fleming noticed mould killing the bacteria in a petri dish.",
         "Penicillin allergies cause a rash in some patients.",
         "The Eiffel Tower is repainted every seven years."],
        reference_kind="output",
        reference="Alexander Fleming discovered penicillin in 1928.",
    )
    # The supporting fact names the answer's discoverer; the topical distractor only echoes the query.
    assert [v.relevant for v in outcome.verdicts] == [True, False, False]
    assert "fleming" in outcome.verdicts[0].reason


async def test_french_and_japanese_samples() -> None:
    fr = await LocalJudge().judge(
        "Quelle est la capitale de l'Australie ?",
        ["Canberra a été choisie comme compromis entre Sydney et Melbourne.", "Les kangourous sautent très vite."],
        reference_kind="output", reference="La capitale de l'Australie est Canberra.")
    ja = await LocalJudge().judge(
        "オーストラリアの首都はどこですか？",
        ["キャンベラはシドニーとメルボルンの妥協案として首都に選ばれた。", "カンガルーは速く跳ぶ。"],
        reference_kind="output", reference="オーストラリアの首都はキャンベラです。")
    assert [v.relevant for v in fr.verdicts] == [True, False]
    assert [v.relevant for v in ja.verdicts] == [True, False]
    assert all(v.reason.startswith("local judge: ") and "character overlap" not in v.reason
               for v in fr.verdicts + ja.verdicts)


async def test_other_scripts_are_judged_by_characters_and_say_so() -> None:
    outcome = await LocalJudge().judge(
        "Какая столица Австралии?",
        ["Канберра была выбрана столицей как компромисс.", "Кенгуру быстро прыгают."],
        reference_kind="output", reference="Столица Австралии — Канберра.")
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert all(v.reason.startswith("local judge: ") and "Cyrillic script: judged by character overlap" in v.reason
               for v in outcome.verdicts)


@pytest.mark.parametrize(("name", "floor"), [
    ("original", 215 / 231), ("en-dev", 0.9), ("en-heldout", 0.9), ("fr-dev", 0.9), ("fr-heldout", 0.85),
    ("ja-dev", 0.9), ("ja-heldout", 0.85), ("en-dev2", 0.85), ("fr-dev2", 0.85), ("ja-dev2", 0.85)])
def test_agreement_on_every_labelled_set_stays_above_its_floor(name: str, floor: float) -> None:
    # Floors a little under the measured figures (docs/LOCAL_JUDGE.md): a change that loses
    # agreement on any set, held-out ones included, fails here.
    result = evaluate(load_cases(name))
    assert result.rate >= floor - 1e-9, "\n".join(result.disagreements)


def test_sets_are_big_enough_and_split() -> None:
    english = load_cases("en-dev") + load_cases("en-heldout")
    assert len(english) >= 150 and sum(len(c["contexts"]) for c in english) >= 600
    for language in ("fr", "ja"):
        assert len(load_cases(f"{language}-dev")) + len(load_cases(f"{language}-heldout")) >= 40
    for language in ("en", "fr", "ja"):  # no question in a development split and the held-out one
        dev = {c["question"] for name in (f"{language}-dev", f"{language}-dev2") for c in load_cases(name)}
        assert not dev & {c["question"] for c in load_cases(f"{language}-heldout")}


STYLES = ("paraphrase", "low-overlap", "numbers", "table", "code", "faq", "domain", "long", "near-duplicate",
          "negation", "multi-hop")
THIRD_ROUND = {"en": ("en-dev3", "en-heldout2"), "fr": ("fr-dev3", "fr-heldout2"), "ja": ("ja-dev3", "ja-heldout2"),
               **{lang: (f"{lang}-dev", f"{lang}-heldout") for lang in ("de", "es", "pt", "it", "nl", "zh", "ko")}}


def test_third_round_sets_cover_every_style_and_language_in_both_splits() -> None:
    for language, names in THIRD_ROUND.items():
        for name in names:
            cases = load_cases(name)
            assert {c["language"] for c in cases} == {language}, name
            styles = [c["style"] for c in cases]
            if language == "en":
                assert len(cases) >= 60 and all(styles.count(style) >= 4 for style in STYLES), name
            else:
                assert len(cases) >= 15 and set(styles) == set(STYLES), name
    # No question, in any language, is in a development split and a held-out one.
    dev = {c["question"].strip().lower() for name in SETS if "heldout" not in name for c in load_cases(name)}
    heldout = {c["question"].strip().lower() for name in SETS if "heldout" in name for c in load_cases(name)}
    assert not dev & heldout


def test_local_scorer_needs_no_network() -> None:
    # A socket guard in a child process: any connection attempt would raise.
    code = (
        "import socket\n"
        "def refuse(*a, **k):\n    raise RuntimeError('network used')\n"
        "socket.socket.connect = refuse\nsocket.create_connection = refuse\n"
        "from ctxprec.scorer import create_context_precision_scorer\n"
        "s = create_context_precision_scorer(context=['Insulin lowers blood sugar.', 'Cats purr.'])\n"
        "r = s.run_sync('What does insulin do?', 'Insulin lowers blood sugar.')\n"
        "print(r.score, r.verdicts[0].relevant, r.verdicts[1].relevant)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1.0", "True", "False"]


def test_stemmer_joins_derivations_irregulars_and_spellings() -> None:
    assert english_stem("activation") == english_stem("activate") == english_stem("activity")
    assert english_stem("invasion") == english_stem("invaded")
    assert english_stem("stolen") == english_stem("theft") == english_stem("steal")
    assert english_stem("children") == english_stem("child")
    assert english_stem("colour") == english_stem("color") and english_stem("organisation") == english_stem("organization")
    assert english_stem("slower") == english_stem("slow") and english_stem("bigger") == english_stem("big")
    assert english_stem("flower") != english_stem("flow")  # a flower is not a comparative
    assert french_stem("joyeuses") == french_stem("joyeux") and french_stem("sportive") == french_stem("sportif")
    assert french_stem("laver") == french_stem("lavez")


def test_acronyms_code_and_alphanumeric_tokens() -> None:
    t = terms("Replace old bulbs with LEDs; use sorted(x) or list.sort(); plants take in CO2.", ENGLISH)
    assert "led" in t.weights  # not "lead": an acronym is not stemmed
    assert {"sorted()", "sort()"} <= set(t.weights) and t.weights["sort()"] == STRONG
    assert "co2" in t.weights


def test_french_names_after_elision_are_names() -> None:
    t = terms("La France est frontalière de l'Espagne.", FRENCH)
    assert t.weights[french_stem("espagne")] == STRONG


async def test_synonyms_count_as_the_answers_words_and_say_so() -> None:
    outcome = await LocalJudge().judge(
        "What should I do if my dog eats chocolate?",
        ["Phone a veterinarian immediately; quick treatment matters.", "Labradors are a popular breed."],
        reference_kind="output",
        reference="Call your vet straight away and tell them how much chocolate your dog ate.",
    )
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "veterinarian ≈ vet" in outcome.verdicts[0].reason and "phone ≈ call" in outcome.verdicts[0].reason


async def test_small_figures_counting_the_same_thing_conflict() -> None:
    outcome = await LocalJudge().judge(
        "How long does standard shipping take?",
        ["Standard orders arrive in 3 to 5 business days.", "Express shipping delivers in 1-2 business days."],
        reference_kind="output",
        reference="Standard shipping takes 3 to 5 business days.",
    )
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "numbers differ" in outcome.verdicts[1].reason


async def test_japanese_single_kanji_words_and_shared_kanji() -> None:
    colours = await LocalJudge().judge(
        "虹の色は何ですか？", ["赤は虹の外側の縁に見える。", "虹は太陽を背にしたときに見える。"],
        reference_kind="output", reference="虹の色は赤、橙、黄、緑、青、藍、紫の七色です。")
    assert [v.relevant for v in colours.verdicts] == [True, False]  # 赤 before a particle is a word
    t = terms("お酒を飲むと朝には体の水分が足りなくなる。", JAPANESE)
    assert "水" in t.kanji and "分" not in t.kanji  # 水分 can meet 脱水 through 水; 分 (minute) is generic


def test_synonym_groups_are_well_formed() -> None:
    from ctxprec.scorer.judge.local_synonyms import EN_GROUPS, FR_GROUPS, JA_GROUPS

    for text in (EN_GROUPS, FR_GROUPS, JA_GROUPS):
        for line in text.strip().splitlines():
            members = [m.strip() for m in line.split(",")]
            assert len(members) >= 2 and all(members), line
            assert all(len(m.split()) <= 3 for m in members), line  # phrases of up to three words

